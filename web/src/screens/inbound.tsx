// Inbound webhooks: where outside systems send (create with a verification method and a
// mapping in JSONata — the secret or the token URL is shown once — change the mapping,
// delete), and what each endpoint received: status, the error a payload failed with, what
// it became (a thread, a run), its raw body, and a replay once the mapping is fixed.
import { useEffect, useState } from "preact/hooks";
import { api, explain, type Who } from "../api";
import { Link } from "../router";

interface Inbound {
  id: string;
  name: string;
  url: string;
  mapping: Record<string, unknown>;
  verification: { method: string; [k: string]: unknown };
  max_bytes: number | null;
}

interface Received {
  id: string;
  webhook_id: string;
  status: string;
  error: string | null;
  result: { thread_id?: string; run_id?: string } | null;
  size: number;
  created_at: string;
  body?: string;
  headers?: Record<string, string>;
}

const EXAMPLE_MAPPING = '{"to": "thread", "setup_id": "<setup id>", "key": "issue.id", "text": "\\"New issue: \\" & issue.title"}';
const VERIFICATIONS: Record<string, string> = {
  standard_webhooks: '{"method": "standard_webhooks"}',
  hmac: '{"method": "hmac", "header": "X-Hub-Signature-256", "prefix": "sha256=", "encoding": "hex", "id_header": "X-GitHub-Delivery"}',
  token: '{"method": "token"}',
};

function parse(label: string, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new Error(`${label} is not JSON: ${(e as Error).message}`);
  }
}

export function InboundHooks(props: { who: Who }) {
  const admin = props.who.role === "admin";
  const [hooks, setHooks] = useState<Inbound[]>([]);
  const [name, setName] = useState("");
  const [method, setMethod] = useState("standard_webhooks");
  const [verification, setVerification] = useState(VERIFICATIONS.standard_webhooks);
  const [secretIn, setSecretIn] = useState("");
  const [mapping, setMapping] = useState(EXAMPLE_MAPPING);
  const [shownOnce, setShownOnce] = useState<string | null>(null);
  const [open, setOpen] = useState<string | null>(null);
  const [error, setError] = useState("");
  const load = () =>
    api<{ data: Inbound[] }>("GET", "/v1/webhooks/inbound")
      .then((r) => setHooks(r.data))
      .catch((e) => setError(explain(e)));
  useEffect(() => {
    load();
  }, []);
  const create = async (e: Event) => {
    e.preventDefault();
    try {
      const body: Record<string, unknown> = { name, verification: parse("The verification", verification), mapping: parse("The mapping", mapping) };
      if (secretIn) body.secret = secretIn;
      const made = await api<any>("POST", "/v1/webhooks/inbound", body);
      setShownOnce(made.token ? `Send to ${location.origin}${made.url} (the token in it is the secret)` : `Send to ${location.origin}${made.url}; the secret: ${made.secret}`);
      setName("");
      setSecretIn("");
      setError("");
      load();
    } catch (err) {
      setError(explain(err));
    }
  };
  const remap = async (hook: Inbound) => {
    const text = prompt("The new mapping (JSON):", JSON.stringify(hook.mapping));
    if (text === null) return;
    try {
      await api("PATCH", `/v1/webhooks/inbound/${hook.id}`, { mapping: parse("The mapping", text) });
      setError("");
      load();
    } catch (err) {
      setError(explain(err));
    }
  };
  const remove = async (hook: Inbound) => {
    if (!confirm(`Delete ${hook.name} and everything it received?`)) return;
    try {
      await api("DELETE", `/v1/webhooks/inbound/${hook.id}`);
      load();
    } catch (err) {
      setError(explain(err));
    }
  };
  return (
    <section>
      <div class="row wrap">
        <h2 class="grow">Inbound webhooks</h2>
        <Link to="/webhooks">← Outbound</Link>
      </div>
      <p class="muted">
        A request is verified, stored, then answered 202; a job maps it (JSONata over the payload) to a thread message or a workflow run. A payload that fails is kept with
        its error: fix the mapping, then replay it.
      </p>
      {error && <p class="error">{error}</p>}
      {shownOnce && (
        <div class="card notice">
          Shown once — copy it now: <code data-testid="inbound-secret">{shownOnce}</code>
          <button class="link" onClick={() => setShownOnce(null)}>
            Done
          </button>
        </div>
      )}
      {admin && (
        <form class="card form" onSubmit={create} data-testid="new-inbound">
          <div class="row wrap">
            <input class="grow" name="name" placeholder="name" value={name} required onInput={(e) => setName((e.target as HTMLInputElement).value)} />
            <select
              name="method"
              value={method}
              onChange={(e) => {
                const m = (e.target as HTMLSelectElement).value;
                setMethod(m);
                setVerification(VERIFICATIONS[m]);
              }}
            >
              <option value="standard_webhooks">Standard Webhooks signature</option>
              <option value="hmac">Provider HMAC header</option>
              <option value="token">Token in the path</option>
            </select>
          </div>
          <label>
            Verification
            <input name="verification" class="mono" value={verification} onInput={(e) => setVerification((e.target as HTMLInputElement).value)} />
          </label>
          {method !== "token" && (
            <input name="secret" type="password" placeholder="the sender's secret (empty: ator makes one)" value={secretIn} onInput={(e) => setSecretIn((e.target as HTMLInputElement).value)} />
          )}
          <label>
            Mapping
            <textarea name="mapping" class="mono" rows={3} value={mapping} onInput={(e) => setMapping((e.target as HTMLTextAreaElement).value)} />
          </label>
          <button type="submit">Add inbound endpoint</button>
        </form>
      )}
      <ul class="list" data-testid="inbound">
        {hooks.map((h) => (
          <li>
            <div class="row wrap">
              <strong>{h.name}</strong>
              <code class="grow small">{h.url}</code>
              <span class="muted small">{h.verification.method}</span>
              <button class="link" onClick={() => setOpen(open === h.id ? null : h.id)}>
                {open === h.id ? "Hide received" : "Received"}
              </button>
              {admin && (
                <>
                  <button class="link" onClick={() => remap(h)}>
                    Change mapping
                  </button>
                  <button class="link danger" onClick={() => remove(h)}>
                    Delete
                  </button>
                </>
              )}
            </div>
            <div class="muted small mono">{JSON.stringify(h.mapping)}</div>
            {open === h.id && <ReceivedList hook={h} admin={admin} onError={setError} />}
          </li>
        ))}
        {hooks.length === 0 && <li class="muted">No inbound endpoints.</li>}
      </ul>
    </section>
  );
}

function ReceivedList(props: { hook: Inbound; admin: boolean; onError: (s: string) => void }) {
  const [rows, setRows] = useState<Received[]>([]);
  const [shown, setShown] = useState<Received | null>(null);
  const load = () =>
    api<{ data: Received[] }>("GET", `/v1/webhooks/inbound/${props.hook.id}/received?limit=100`)
      .then((r) => setRows(r.data))
      .catch((e) => props.onError(explain(e)));
  useEffect(() => {
    load();
  }, [props.hook.id]);
  const replay = (r: Received) =>
    api("POST", `/v1/webhooks/inbound/received/${r.id}/replay`)
      .then(load)
      .catch((e) => props.onError(explain(e)));
  const show = (r: Received) =>
    api<Received>("GET", `/v1/webhooks/inbound/received/${r.id}`)
      .then(setShown)
      .catch((e) => props.onError(explain(e)));
  return (
    <div class="card" data-testid="received">
      <div class="row">
        <strong class="grow">Received</strong>
        <button class="link" onClick={load}>
          Refresh
        </button>
      </div>
      <ul class="list">
        {rows.map((r) => (
          <li class="row wrap">
            <span class="small">{new Date(r.created_at).toLocaleString()}</span>
            <code class="small">{r.webhook_id}</code>
            <span class="badge" data-testid="received-status">
              {r.status}
            </span>
            {r.result?.thread_id && <Link to={`/threads/${r.result.thread_id}`}>thread</Link>}
            {r.result?.run_id && <code class="small">run {r.result.run_id}</code>}
            {r.error && <span class="error small grow">{r.error}</span>}
            <button class="link right" onClick={() => show(r)}>
              Body
            </button>
            {props.admin && r.status === "failed" && (
              <button class="link" onClick={() => replay(r)}>
                Replay
              </button>
            )}
          </li>
        ))}
        {rows.length === 0 && <li class="muted">Nothing received yet.</li>}
      </ul>
      {shown && (
        <div class="card">
          <div class="row">
            <strong class="grow">{shown.size} bytes</strong>
            <button class="link" onClick={() => setShown(null)}>
              Close
            </button>
          </div>
          <pre class="small mono">{shown.body}</pre>
        </div>
      )}
    </div>
  );
}
