// Workflow runs: the org's runs (GET /v1/runs, read once when the screen opens) and one run
// drawn as a graph of its recipe's steps. A fan-out (map) is ONE card with a histogram of its
// children's states, never one row per child. The run is read once over HTTP (the run, its
// recipe, its steps), then every change arrives over the socket's `run:<id>` room from the
// run's `last_seq`: no polling, an idle run page makes no requests. A step's panel shows what
// the step list holds; its input and whole output are loaded only when asked for. An open
// `human` gate (the run `waiting`) shows its prompt and a form to decide it: the gate is read
// when the run is read or when its `gate_opened` event arrives, and the decision goes over the
// socket (`decide`, the approvals' decide-once path); `gate_decided` closes the form.
import { useEffect, useMemo, useState } from "preact/hooks";
import { api, explain } from "../api";
import type { Frame, Live } from "../live";
import { Link } from "../router";

interface Run {
  id: string;
  workflow_id: string;
  version: number;
  status: string;
  fail_reason: string | null;
  cancel_reason: string | null;
  pause_reason: string | null;
  error: string | null;
  budget: { max_steps: number; steps_used: number; wall_clock_s: number };
  last_seq: number;
  created_at: string;
  finished_at: string | null;
}

interface Step {
  id: string;
  parent_id: string | null;
  path: string;
  type: string;
  status: string;
  attempt: number;
  output_size: number | null;
  preview: string | null;
  error: string | null;
  created_at: string;
  finished_at: string | null;
}

interface RecipeStep {
  id: string;
  type: string;
}

interface Gate {
  id: string;
  status: string;
  name: string;
  expires_at: string | null;
  subject: { run_id?: string; prompt?: string; input_schema?: unknown; deciders?: unknown };
}

const ENDS: Record<string, string> = {
  run_succeeded: "succeeded",
  run_failed: "failed",
  run_cancelled: "cancelled",
  run_paused: "paused",
  run_resumed: "running",
};
// The histogram's buckets, in the order they are drawn.
const BUCKETS = ["done", "failed", "running", "pending"] as const;
type Bucket = (typeof BUCKETS)[number];

function bucket(status: string): Bucket {
  if (status === "done" || status === "skipped") return "done";
  if (status === "failed" || status === "cancelled") return "failed";
  if (status === "running" || status === "queued" || status === "waiting") return "running";
  return "pending";
}

function parentOf(path: string): string | null {
  const i = path.lastIndexOf("/");
  return i < 0 ? null : path.slice(0, i);
}

async function allSteps(runId: string): Promise<Step[]> {
  const out: Step[] = [];
  let cursor: string | null = null;
  do {
    const q: string = cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
    const page: { data: Step[]; next_cursor: string | null } = await api(
      "GET",
      `/v1/runs/${runId}/steps?limit=200${q}`,
    );
    out.push(...page.data);
    cursor = page.next_cursor;
  } while (cursor);
  return out;
}

export function Runs() {
  const [runs, setRuns] = useState<Run[] | null>(null);
  const [error, setError] = useState("");
  useEffect(() => {
    api<{ data: Run[] }>("GET", "/v1/runs?limit=50")
      .then((r) => setRuns(r.data))
      .catch((e) => setError(explain(e)));
  }, []);
  if (error) return <div class="error">{error}</div>;
  if (!runs) return <div class="muted">Loading runs…</div>;
  return (
    <section>
      <h2>Workflow runs</h2>
      {runs.length === 0 && <p class="muted">No runs yet.</p>}
      <table class="runs" data-testid="runs">
        <tbody>
          {runs.map((r) => (
            <tr key={r.id}>
              <td>
                <Link to={`/runs/${r.id}`}>{r.id.slice(0, 8)}</Link>
              </td>
              <td class={`badge st-${r.status}`}>{r.status}</td>
              <td class="muted small">
                {r.budget.steps_used} / {r.budget.max_steps} steps
              </td>
              <td class="muted small">{new Date(r.created_at).toLocaleString()}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

function Histogram(props: { counts: Record<Bucket, number>; total: number }) {
  const { counts, total } = props;
  return (
    <div class="histogram" data-testid="histogram">
      <div class="bar">
        {BUCKETS.map((b) =>
          counts[b] ? (
            <span key={b} class={`seg seg-${b}`} style={{ width: `${(100 * counts[b]) / Math.max(total, 1)}%` }} />
          ) : null,
        )}
      </div>
      <div class="small">
        {BUCKETS.map((b) => (
          <span key={b} class="count">
            {b} <strong data-testid={`count-${b}`}>{counts[b]}</strong>
          </span>
        ))}
        <span class="muted"> of {total}</span>
      </div>
    </div>
  );
}

function Panel(props: { runId: string; step: Step | undefined; id: string; counts?: Record<Bucket, number> }) {
  const { step } = props;
  const [full, setFull] = useState<any>(null);
  const [error, setError] = useState("");
  useEffect(() => {
    setFull(null);
    setError("");
  }, [props.id]);
  if (!step) return <aside class="card step-panel" data-testid="step-panel">Step <strong>{props.id}</strong> has not started.</aside>;
  // A step first seen in an event has no id yet: it is looked up when asked for, not before.
  const load = async () => {
    try {
      const id = step.id || (await allSteps(props.runId)).find((s) => s.path === step.path)?.id;
      if (!id) throw new Error("The step is not stored yet.");
      setFull(await api("GET", `/v1/runs/${props.runId}/steps/${id}`));
    } catch (e) {
      setError(explain(e));
    }
  };
  const usage = full?.output?.usage ?? null;
  const cost = full?.output?.cost_usd ?? null;
  return (
    <aside class="card step-panel" data-testid="step-panel">
      <h3>
        {step.path} <span class="muted small">{step.type}</span>
      </h3>
      <dl>
        <dt>Status</dt>
        <dd data-testid="panel-status">{step.status}</dd>
        <dt>Attempts</dt>
        <dd>{step.attempt}</dd>
        <dt>Usage</dt>
        <dd>{usage ? JSON.stringify(usage) : <span class="muted">none reported</span>}</dd>
        <dt>Cost</dt>
        <dd>{cost !== null ? `$${cost}` : <span class="muted">none reported</span>}</dd>
        {step.error && (
          <>
            <dt>Error</dt>
            <dd class="error">{step.error}</dd>
          </>
        )}
      </dl>
      {step.preview && !full && <pre class="preview">{step.preview}</pre>}
      {full ? (
        <>
          <h4>Input</h4>
          <pre>{JSON.stringify(full.input, null, 2)}</pre>
          <h4>Output</h4>
          <pre data-testid="panel-output">{JSON.stringify(full.output, null, 2)}</pre>
        </>
      ) : (
        <button onClick={load} data-testid="load-output">
          Load input and output{step.output_size ? ` (${step.output_size} bytes)` : ""}
        </button>
      )}
      {error && <div class="error">{error}</div>}
    </aside>
  );
}

export function RunView(props: { runId: string; live: Live }) {
  const { runId, live } = props;
  const [run, setRun] = useState<Run | null>(null);
  const [recipe, setRecipe] = useState<RecipeStep[]>([]);
  const [steps, setSteps] = useState<Map<string, Step>>(new Map());
  const [expanded, setExpanded] = useState<Map<string, number>>(new Map());
  const [selected, setSelected] = useState<string | null>(null);
  const [error, setError] = useState("");
  const [gate, setGate] = useState<Gate | null>(null);

  useEffect(() => {
    let off: (() => void) | null = null;
    let gone = false;
    const openGate = async (id: string) => {
      const g = await api<Gate>("GET", `/v1/approvals/${id}`);
      if (!gone && g.status === "pending") setGate(g);
    };
    (async () => {
      const r = await api<Run>("GET", `/v1/runs/${runId}`);
      if (r.status === "waiting") {
        const page = await api<{ data: Gate[] }>("GET", "/v1/approvals?kind=gate&limit=200");
        const mine = page.data.find((g) => g.subject?.run_id === runId);
        if (mine && !gone) setGate(mine);
      }
      const version = await api<{ recipe: { steps: RecipeStep[] } }>(
        "GET",
        `/v1/workflows/${r.workflow_id}/versions/${r.version}`,
      );
      const list = await allSteps(runId);
      if (gone) return;
      setRun(r);
      setRecipe(version.recipe.steps ?? []);
      setSteps(new Map(list.map((s) => [s.path, s])));
      // Everything after what was just read comes over the socket, in seq order, once.
      off = live.followRun(runId, r.last_seq, (f: Frame) => apply(f));
    })().catch((e) => setError(explain(e)));

    const apply = (f: Frame) => {
      if (f.type === "error") {
        setError(f.data.detail);
        return;
      }
      const kind = f.type;
      const data = f.data?.data ?? {};
      if (kind === "gate_opened") {
        setRun((r) => (r ? { ...r, status: "waiting" } : r));
        openGate(String(data.approval_id)).catch((e) => setError(explain(e)));
      } else if (kind === "gate_decided") {
        setGate(null);
        setRun((r) => (r ? { ...r, status: "running" } : r));
      }
      if (kind in ENDS) {
        setRun((r) => (r ? { ...r, status: ENDS[kind], last_seq: f.seq ?? r.last_seq } : r));
        return;
      }
      const path: string | undefined = data.step;
      if (!path) return;
      if (kind === "step_expanded") {
        setExpanded((m) => new Map(m).set(path, Number(data.items) || 0));
      }
      const status = kind === "step_done" ? "done" : kind === "step_failed" ? "failed" : kind === "step_expanded" ? "running" : null;
      if (!status) return;
      setSteps((m) => {
        const next = new Map(m);
        const had = next.get(path);
        next.set(path, {
          ...(had ?? { id: "", parent_id: parentOf(path), path, type: "", attempt: 0, output_size: null, preview: null, created_at: "", finished_at: null }),
          status,
          attempt: data.attempt ?? had?.attempt ?? 0,
          error: data.error ?? had?.error ?? null,
        } as Step);
        return next;
      });
    };
    return () => {
      gone = true;
      off?.();
    };
  }, [runId]);

  // Children's states per fan-out, counted from the steps (one pass, not one row each).
  const fanouts = useMemo(() => {
    const out = new Map<string, { counts: Record<Bucket, number>; total: number }>();
    for (const s of steps.values()) {
      const parent = parentOf(s.path);
      if (parent === null) continue;
      let f = out.get(parent);
      if (!f) out.set(parent, (f = { counts: { done: 0, failed: 0, running: 0, pending: 0 }, total: 0 }));
      f.counts[bucket(s.status)] += 1;
      f.total += 1;
    }
    for (const [path, items] of expanded) {
      const f = out.get(path) ?? { counts: { done: 0, failed: 0, running: 0, pending: 0 }, total: 0 };
      if (items > f.total) {
        f.counts.pending += items - f.total; // made, not yet seen: the list was read before
        f.total = items;
      }
      out.set(path, f);
    }
    return out;
  }, [steps, expanded]);

  if (error) return <div class="error" data-testid="run-error">{error}</div>;
  if (!run) return <div class="muted">Loading run…</div>;
  const reason = run.fail_reason || run.cancel_reason || run.pause_reason;
  return (
    <section class="run-view">
      <h2>
        Run <span class="mono">{run.id.slice(0, 8)}</span>{" "}
        <span class={`badge st-${run.status}`} data-testid="run-status">
          {run.status}
        </span>
        {reason && <span class="muted small"> {reason}</span>}
      </h2>
      <p class="muted small">
        version {run.version} · budget {run.budget.max_steps} steps, {run.budget.wall_clock_s} s wall clock
      </p>
      <div class="run-body">
        <ol class="graph" data-testid="graph">
          {recipe.map((r, i) => {
            const s = steps.get(r.id);
            const fan = fanouts.get(r.id);
            return (
              <li key={r.id} class="node-wrap">
                {i > 0 && <div class="edge" aria-hidden="true">↓</div>}
                <button
                  class={`card run-node st-${s?.status ?? "pending"} ${selected === r.id ? "selected" : ""}`}
                  data-testid={`node-${r.id}`}
                  onClick={() => setSelected(r.id)}
                >
                  <div>
                    <strong>{r.id}</strong> <span class="muted small">{r.type}</span>
                    <span class="badge">{s?.status ?? "pending"}</span>
                  </div>
                  {fan && <Histogram counts={fan.counts} total={fan.total} />}
                </button>
              </li>
            );
          })}
        </ol>
        {selected && <Panel runId={runId} id={selected} step={steps.get(selected)} />}
      </div>
      {gate && <GateForm gate={gate} live={live} />}
    </section>
  );
}

// An open gate: its prompt, the decision's value (JSON, checked by the server against the
// gate's input schema) and approve / deny over the socket.
function GateForm(props: { gate: Gate; live: Live }) {
  const g = props.gate;
  const [value, setValue] = useState("{}");
  const [reason, setReason] = useState("");
  const [error, setError] = useState("");
  const [sending, setSending] = useState(false);

  const decide = async (decision: "approve" | "deny") => {
    const payload: Record<string, unknown> = { approval_id: g.id, decision };
    if (decision === "approve") {
      try {
        payload.arguments = JSON.parse(value);
      } catch {
        setError("The decision is not valid JSON.");
        return;
      }
    } else if (reason.trim()) payload.reason = reason.trim();
    setSending(true);
    try {
      await props.live.command("decide", payload);
      setError("");
    } catch (e) {
      setError(explain(e));
    }
    setSending(false);
  };

  return (
    <div class="card gate" data-testid="gate">
      <div>
        <strong>Waiting for a decision</strong> <span class="muted small">step {g.name}</span>
      </div>
      <p data-testid="gate-prompt">{g.subject?.prompt ?? ""}</p>
      <details>
        <summary class="muted small">what the decision must look like</summary>
        <pre class="mono small">{JSON.stringify(g.subject?.input_schema ?? {}, null, 2)}</pre>
      </details>
      {g.expires_at && (
        <div class="muted small">times out at {new Date(g.expires_at).toLocaleString()}</div>
      )}
      <textarea
        data-testid="gate-value"
        rows={4}
        style="width: 100%; font-family: monospace"
        value={value}
        onInput={(e) => setValue((e.target as HTMLTextAreaElement).value)}
      />
      <div class="row">
        <button data-testid="gate-approve" disabled={sending} onClick={() => decide("approve")}>
          Approve
        </button>
        <input
          data-testid="gate-reason"
          placeholder="reason (for a denial)"
          value={reason}
          onInput={(e) => setReason((e.target as HTMLInputElement).value)}
        />
        <button data-testid="gate-deny" class="danger" disabled={sending} onClick={() => decide("deny")}>
          Deny
        </button>
      </div>
      {error && <p class="error" data-testid="gate-error">{error}</p>}
    </div>
  );
}
