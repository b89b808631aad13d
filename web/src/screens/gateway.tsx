// The MCP gateway's calls (admins): the org's audit of tool calls made through /mcp, newest
// first, a page at a time (GET /v1/gateway/calls, cursor-paged). The arguments are never kept,
// only their sha256; each row says which key called, the tool, how long it took, the result's
// size and how it ended.
import { useEffect, useState } from "preact/hooks";
import { api, explain } from "../api";

interface Call {
  id: string;
  principal_kind: "key" | "user";
  principal_id: string;
  tool: string;
  args_sha256: string;
  duration_ms: number;
  result_chars: number;
  outcome: "ok" | "error";
  error_code: string | null;
  created_at: string;
}

const PAGE = 50;

export function GatewayCalls() {
  // cursors[i] is the cursor that loads page i (null: the newest page)
  const [cursors, setCursors] = useState<(string | null)[]>([null]);
  const [page, setPage] = useState(0);
  const [rows, setRows] = useState<Call[] | null>(null);
  const [next, setNext] = useState<string | null>(null);
  const [keys, setKeys] = useState<Record<string, string>>({});
  const [error, setError] = useState("");
  const [tick, setTick] = useState(0);

  useEffect(() => {
    setRows(null);
    const cursor = cursors[page];
    const query = `limit=${PAGE}` + (cursor ? `&cursor=${encodeURIComponent(cursor)}` : "");
    api<{ data: Call[]; next_cursor: string | null }>("GET", `/v1/gateway/calls?${query}`)
      .then((r) => {
        setRows(r.data);
        setNext(r.next_cursor);
        setError("");
      })
      .catch((e) => setError(explain(e)));
  }, [page, tick]);

  useEffect(() => {
    api<{ data: { id: string; name: string }[] }>("GET", "/v1/api-keys")
      .then((r) => setKeys(Object.fromEntries(r.data.map((k) => [k.id, k.name]))))
      .catch(() => setKeys({}));
  }, []);

  const older = () => {
    if (!next) return;
    setCursors([...cursors.slice(0, page + 1), next]);
    setPage(page + 1);
  };
  const newest = () => {
    setCursors([null]);
    setPage(0);
    setTick(tick + 1);
  };

  return (
    <section>
      <h2>MCP gateway calls</h2>
      <p class="muted small">
        Tool calls made by outside MCP clients through <code>/mcp</code> with this org's keys. Arguments are not kept:
        only their SHA-256.
      </p>
      <div class="row wrap filters">
        <button onClick={newest} data-testid="gateway-newest">
          Newest
        </button>
        <button disabled={page === 0} onClick={() => setPage(page - 1)} data-testid="gateway-newer">
          ← Newer
        </button>
        <button disabled={!next} onClick={older} data-testid="gateway-older">
          Older →
        </button>
        <span class="muted small">page {page + 1}</span>
      </div>
      {error && <p class="error">{error}</p>}
      {rows === null && !error && <p class="muted">Loading…</p>}
      {rows && rows.length === 0 && <p class="muted">No call was made through the gateway yet.</p>}
      {rows && rows.length > 0 && (
        <div class="scroll-x">
          <table data-testid="gateway-calls">
            <thead>
              <tr>
                <th>When</th>
                <th>Key</th>
                <th>Tool</th>
                <th>Outcome</th>
                <th>ms</th>
                <th>Result chars</th>
                <th>Arguments (sha256)</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((r) => (
                <tr data-testid="gateway-call">
                  <td title={r.created_at}>{new Date(r.created_at).toLocaleString()}</td>
                  <td title={r.principal_id}>{keys[r.principal_id] ?? `${r.principal_kind} ${r.principal_id.slice(0, 8)}`}</td>
                  <td>
                    <code>{r.tool}</code>
                  </td>
                  <td class={r.outcome === "ok" ? "" : "error"}>{r.outcome === "ok" ? "ok" : r.error_code ?? "error"}</td>
                  <td>{r.duration_ms}</td>
                  <td>{r.result_chars}</td>
                  <td title={r.args_sha256}>
                    <code>{r.args_sha256.slice(0, 12)}…</code>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
