// Usage by month, per setup and per thread, with a bar chart (plain SVG).
import { useEffect, useState } from "preact/hooks";
import { api, explain, money } from "../api";
import { Link } from "../router";

interface Row {
  key: string | null;
  calls: number;
  input_tokens: number;
  output_tokens: number;
  cache_read_tokens: number;
  cache_write_tokens: number;
  cost_usd: string;
  all_priced?: boolean;
}

function Chart(props: { rows: Row[]; names: Record<string, string> }) {
  const rows = props.rows.slice(0, 10);
  const max = Math.max(...rows.map((r) => Number(r.cost_usd)), 1e-9);
  const h = 22;
  return (
    <svg class="chart" viewBox={`0 0 520 ${rows.length * h + 4}`} role="img" aria-label="cost by item" data-testid="usage-chart">
      {rows.map((r, i) => {
        const w = Math.max(2, (Number(r.cost_usd) / max) * 280);
        const label = props.names[r.key ?? ""] ?? (r.key ?? "—").slice(0, 8);
        return (
          <g transform={`translate(0 ${i * h + 2})`}>
            <text x="6" y="15" font-size="12">
              {label.slice(0, 18)}
            </text>
            <rect x="130" y="3" width={w} height="15" rx="2" class="bar" />
            <text x={135 + w} y="15" font-size="11">
              {money(r.cost_usd)}
            </text>
          </g>
        );
      })}
    </svg>
  );
}

export function Usage() {
  const [month, setMonth] = useState(new Date().toISOString().slice(0, 7));
  const [group, setGroup] = useState<"setup" | "thread">("setup");
  const [rows, setRows] = useState<Row[] | null>(null);
  const [names, setNames] = useState<Record<string, string>>({});
  const [error, setError] = useState("");
  useEffect(() => {
    setRows(null);
    api<{ data: Row[] }>("GET", `/v1/usage?month=${month}&group_by=${group}`)
      .then((r) => {
        setRows(r.data);
        setError("");
      })
      .catch((e) => setError(explain(e)));
  }, [month, group]);
  useEffect(() => {
    const path = group === "setup" ? "/v1/setups" : "/v1/threads?limit=200";
    api<{ data: any[] }>("GET", path)
      .then((r) => setNames(Object.fromEntries(r.data.map((x) => [x.id, x.name ?? (x.title || "Untitled")]))))
      .catch(() => setNames({}));
  }, [group]);
  const total = (rows ?? []).reduce((a, r) => a + Number(r.cost_usd), 0);
  return (
    <section>
      <h2>Usage</h2>
      <div class="row wrap filters">
        <input type="month" value={month} onChange={(e) => setMonth((e.target as HTMLInputElement).value)} />
        <select value={group} onChange={(e) => setGroup((e.target as HTMLSelectElement).value as any)}>
          <option value="setup">per setup</option>
          <option value="thread">per thread</option>
        </select>
        <strong>Total {money(total)}</strong>
        <Link to="/analyses" testid="to-analyses">
          Analyses →
        </Link>
      </div>
      {error && <p class="error">{error}</p>}
      {rows && rows.length === 0 && <p class="muted">Nothing was spent in {month}.</p>}
      {rows && rows.length > 0 && (
        <>
          <Chart rows={rows} names={names} />
          <div class="scroll-x">
            <table data-testid="usage">
              <thead>
                <tr>
                  <th>{group}</th>
                  <th>Calls</th>
                  <th>In</th>
                  <th>Out</th>
                  <th>Cache r/w</th>
                  <th>USD</th>
                </tr>
              </thead>
              <tbody>
                {rows.map((r) => (
                  <tr>
                    <td>{names[r.key ?? ""] ?? r.key}</td>
                    <td>{r.calls}</td>
                    <td>{r.input_tokens}</td>
                    <td>{r.output_tokens}</td>
                    <td>
                      {r.cache_read_tokens}/{r.cache_write_tokens}
                    </td>
                    <td>
                      {money(r.cost_usd)}
                      {r.all_priced === false && <span class="muted" title="some calls used a model with no price"> (unpriced calls)</span>}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </>
      )}
    </section>
  );
}
