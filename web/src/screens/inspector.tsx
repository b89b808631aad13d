// The inspector of a turn's model calls (GET /v1/turns/{id}/calls): per call the prompt
// layers (name, version, short hash, size, replaced), the tools (origin, size, on demand),
// the cache breakpoints, the request size, usage with cache read/write, USD, latency and
// time to first token, compaction applied, and what broke the prompt cache since the
// thread's previous call, in words. Opened from a turn's footer and from the Turns tab.
// Only what the API gives; a 404 (another person's thread, another org) is "not yours".
import { useEffect, useState } from "preact/hooks";
import { api, ApiError, explain, money } from "../api";
import { registerTurnAction } from "../panels";

const LAYER_WORDS: Record<string, string> = {
  core: "ator's core instructions changed",
  org_policy: "the org policy changed",
  persona: "the setup's persona changed",
  thread: "this thread's instructions changed",
  tools: "the list of tools in the system prompt changed",
  voice: "the thread's voice mode changed",
};

/** One entry of `diff.cache_broken_by` (e.g. "layer:org_policy") in words. */
export function cacheWords(part: string): string {
  if (part === "model") return "the model changed";
  if (part === "messages") return "the history was rewritten (compacted), not only extended";
  if (part === "tools:order") return "the tools were reordered";
  if (part === "config_hash") return "the turn's configuration changed";
  if (part === "breakpoints") return "the cache breakpoints moved to other parts";
  const [kind, name] = [part.split(":", 1)[0], part.slice(part.indexOf(":") + 1)];
  if (kind === "tool") return `the tool ${name} was added, removed or changed`;
  if (kind === "layer") return LAYER_WORDS[name] ?? `the ${name} layer changed (or was added or dropped)`;
  return part;
}

const short = (h: unknown) => (typeof h === "string" ? h.slice(0, 8) : "—");
const ms = (v: number | null | undefined) => (v == null ? "—" : v < 1000 ? `${v} ms` : `${(v / 1000).toFixed(2)} s`);
const kb = (v: number | null | undefined) => (v == null ? "—" : v < 1024 ? `${v} B` : `${(v / 1024).toFixed(1)} KB`);

function CacheDiff(props: { call: any }) {
  const d = props.call.diff ?? {};
  const broken: string[] = d.cache_broken_by ?? [];
  const other: string[] = (d.changed ?? []).filter((c: string) => !broken.includes(c));
  let text;
  if (d.previous_id == null) text = "The thread's first call: nothing earlier to compare with.";
  else if (broken.length === 0) text = `The cached prefix is the same as call #${d.previous_id}'s: the cache could be reused.`;
  else
    text = (
      <>
        Cache broken by <code>{broken[0]}</code>: {cacheWords(broken[0])} since call #{d.previous_id}
        {broken.length > 1 && <>; after it also {broken.slice(1).map(cacheWords).join("; ")}</>}.
      </>
    );
  return (
    <p class={`cache ${broken.length ? "bad" : ""}`} data-testid="cache-diff" data-broken={broken.join(" ")}>
      {text}
      {other.length > 0 && <span class="muted"> Also different: {other.map(cacheWords).join("; ")}.</span>}
    </p>
  );
}

function Call(props: { call: any }) {
  const c = props.call;
  const r = c.request ?? {};
  const u = c.usage ?? {};
  const comp = r.compaction;
  return (
    <div class="card call" data-testid="model-call" data-call={c.id}>
      <div class="row wrap">
        <strong>
          Call #{c.id} · step {c.step}
        </strong>
        <span class="muted">
          {c.purpose} · {c.provider}/{c.model} · {c.stop_reason ?? "no stop reason"}
        </span>
      </div>
      <CacheDiff call={c} />
      <div class="facts">
        <span title="request size / estimated tokens">
          request {kb(r.request_bytes)} (~{r.estimated_tokens ?? "?"} tokens, {r.messages?.count ?? 0} messages)
        </span>
        <span>
          {u.input_tokens} in / {u.output_tokens} out
        </span>
        <span data-testid="call-cache">
          cache {u.cache_read_tokens} read / {u.cache_write_tokens} write
        </span>
        <span>
          {money(c.cost_usd)}
          {c.priced === false && " (model not priced)"}
        </span>
        <span>latency {ms(c.latency_ms)}</span>
        <span>first token {ms(c.ttft_ms)}</span>
        {u.reported === false && <span class="muted">usage not reported by the provider</span>}
        {u.estimated && <span class="muted">usage estimated</span>}
        <span class="muted" title="configuration hash">
          config {short(r.config_hash)}
        </span>
      </div>
      {comp && (
        <p class="notice small" data-testid="compaction">
          Compaction applied: messages through seq {comp.through_seq} replaced by a summary ({kb(comp.bytes_before)} →{" "}
          {kb(comp.bytes_after)}, budget {kb(comp.budget_bytes)}
          {comp.forced ? ", forced" : ""}).
        </p>
      )}
      {(r.notifications ?? []).length > 0 && (
        <p class="small">Notifications injected before this call: {(r.notifications ?? []).length}</p>
      )}
      {(r.mcp_problems ?? []).length > 0 && (
        <p class="small error">Tool server problems: {(r.mcp_problems ?? []).map((p: any) => (typeof p === "string" ? p : JSON.stringify(p))).join("; ")}</p>
      )}
      <div class="scroll-x">
        <table class="small" data-testid="layers">
          <thead>
            <tr>
              <th>Layer</th>
              <th>Version</th>
              <th>Hash</th>
              <th>Size</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {(r.layers ?? []).map((l: any) => (
              <tr data-testid="layer" data-name={l.name} data-hash={l.hash}>
                <td>{l.name}</td>
                <td>v{l.version ?? 0}</td>
                <td>
                  <code title={l.hash}>{short(l.hash)}</code>
                </td>
                <td>{l.chars} chars</td>
                <td>{l.replace ? "replaces the core instructions" : ""}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {(r.tools ?? []).length > 0 && (
        <div class="scroll-x">
          <table class="small" data-testid="tools">
            <thead>
              <tr>
                <th>Tool</th>
                <th>Origin</th>
                <th>Size</th>
                <th>On demand</th>
              </tr>
            </thead>
            <tbody>
              {(r.tools ?? []).map((t: any) => (
                <tr>
                  <td>{t.name}</td>
                  <td>{t.origin ?? "—"}</td>
                  <td>{t.chars} chars</td>
                  <td>{t.on_demand ? "yes" : "no"}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <p class="small muted">
        Cache breakpoints: {(r.breakpoints ?? []).length ? (r.breakpoints ?? []).join(", ") : "none"}
      </p>
    </div>
  );
}

export function Inspector(props: { turnId: string; onClose: () => void }) {
  const [calls, setCalls] = useState<any[] | null>(null);
  const [error, setError] = useState("");
  useEffect(() => {
    api<{ data: any[] }>("GET", `/v1/turns/${props.turnId}/calls`)
      .then((r) => setCalls(r.data))
      .catch((e) =>
        setError(
          e instanceof ApiError && e.status === 404
            ? "Not yours to see: only the person who started this thread and the org's admins can inspect its model calls."
            : explain(e),
        ),
      );
  }, [props.turnId]);
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => e.key === "Escape" && props.onClose();
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, []);
  return (
    <div class="overlay" onClick={(e) => e.target === e.currentTarget && props.onClose()}>
      <div class="sheet" role="dialog" data-testid="inspector" data-turn={props.turnId}>
        <div class="row">
          <h2 class="grow">Model calls of turn {props.turnId.slice(0, 8)}</h2>
          <button class="link" onClick={props.onClose} data-testid="close-inspector">
            Close
          </button>
        </div>
        {error && (
          <p class="error" role="alert">
            {error}
          </p>
        )}
        {!calls && !error && <p class="muted">Loading…</p>}
        {calls && calls.length === 0 && <p class="muted">This turn made no model call.</p>}
        {calls?.map((c) => <Call call={c} />)}
      </div>
    </div>
  );
}

function InspectAction(props: { turnId: string; threadId: string }) {
  const [open, setOpen] = useState(false);
  if (!props.turnId) return null;
  return (
    <>
      <button class="link small" data-testid="inspect" onClick={() => setOpen(true)}>
        Inspect calls
      </button>
      {open && <Inspector turnId={props.turnId} onClose={() => setOpen(false)} />}
    </>
  );
}

registerTurnAction({ id: "inspect", label: "Inspect calls", component: InspectAction });
