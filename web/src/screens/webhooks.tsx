// Outbound webhooks: the org's endpoints (create with event filters — the secret is shown
// once — rotate, test, disable/enable, delete), a banner for endpoints that were disabled
// (410, failing too long, an admin) and each endpoint's delivery log with its attempts,
// replay of one delivery or of a time range. Admins manage; everyone else reads.
import { useEffect, useState } from "preact/hooks";
import { api, explain, type Who } from "../api";
import { Link } from "../router";

interface Endpoint {
  id: string;
  url: string;
  description: string;
  event_types: string[];
  enabled: boolean;
  disabled_reason: string | null;
  disabled_at: string | null;
  failing_since: string | null;
  previous_secret_until: string | null;
}

interface Delivery {
  id: string;
  webhook_id: string;
  event_type: string;
  status: string;
  attempts: number;
  last_status: number | null;
  created_at: string;
  log?: { attempt: number; status: number | null; latency_ms: number; error: string | null; response_excerpt: string | null; at: string }[];
}

const when = (t: string | null) => (t ? new Date(t).toLocaleString() : "");

export function Webhooks(props: { who: Who }) {
  const admin = props.who.role === "admin";
  const [endpoints, setEndpoints] = useState<Endpoint[]>([]);
  const [types, setTypes] = useState<{ name: string; description: string }[]>([]);
  const [url, setUrl] = useState("");
  const [description, setDescription] = useState("");
  const [picked, setPicked] = useState<string[]>([]);
  const [secret, setSecret] = useState<{ label: string; value: string } | null>(null);
  const [open, setOpen] = useState<string | null>(null);
  const [error, setError] = useState("");
  const load = () =>
    api<{ data: Endpoint[] }>("GET", "/v1/webhooks/endpoints")
      .then((r) => setEndpoints(r.data))
      .catch((e) => setError(explain(e)));
  useEffect(() => {
    load();
    api<{ data: { name: string; description: string }[] }>("GET", "/v1/webhooks/event-types")
      .then((r) => setTypes(r.data))
      .catch((e) => setError(explain(e)));
  }, []);
  const act = async (work: () => Promise<unknown>) => {
    try {
      await work();
      setError("");
      load();
    } catch (err) {
      setError(explain(err));
    }
  };
  const create = (e: Event) => {
    e.preventDefault();
    act(async () => {
      const made = await api<Endpoint & { secret: string }>("POST", "/v1/webhooks/endpoints", { url, description, event_types: picked });
      setSecret({ label: `Signing secret of ${made.url}`, value: made.secret });
      setUrl("");
      setDescription("");
      setPicked([]);
    });
  };
  const rotate = (ep: Endpoint) =>
    act(async () => {
      if (!confirm("Make a new signing secret? The old one keeps signing beside it for a day.")) return;
      const r = await api<{ secret: string }>("POST", `/v1/webhooks/endpoints/${ep.id}/rotate-secret`, { overlap_s: 86400 });
      setSecret({ label: `New signing secret of ${ep.url}`, value: r.secret });
    });
  const disabled = endpoints.filter((e) => !e.enabled);
  return (
    <section>
      <div class="row wrap">
        <h2 class="grow">Webhooks</h2>
        <Link to="/webhooks/inbound" testid="to-inbound">
          Inbound →
        </Link>
      </div>
      <p class="muted">Endpoints receive ator's events as signed Standard Webhooks (verify them with any Standard Webhooks library and the endpoint's secret).</p>
      {error && <p class="error">{error}</p>}
      {disabled.length > 0 && (
        <div class="card error" data-testid="disabled-banner">
          {disabled.length === 1 ? "An endpoint is disabled" : `${disabled.length} endpoints are disabled`} and receives nothing:
          <ul>
            {disabled.map((e) => (
              <li>
                <code>{e.url}</code> — {e.disabled_reason} ({when(e.disabled_at)})
              </li>
            ))}
          </ul>
        </div>
      )}
      {secret && (
        <div class="card notice">
          {secret.label}, shown once — copy it now: <code data-testid="new-secret">{secret.value}</code>
          <button class="link" onClick={() => setSecret(null)}>
            Done
          </button>
        </div>
      )}
      {admin && (
        <form class="card form" onSubmit={create} data-testid="new-endpoint">
          <div class="row wrap">
            <input class="grow" name="url" placeholder="https://example.com/hooks/ator" value={url} required onInput={(e) => setUrl((e.target as HTMLInputElement).value)} />
            <input name="description" placeholder="description" value={description} onInput={(e) => setDescription((e.target as HTMLInputElement).value)} />
          </div>
          <div class="row wrap small">
            <span class="muted">Events (none: all):</span>
            {types.map((t) => (
              <label class="inline" title={t.description}>
                <input
                  type="checkbox"
                  checked={picked.includes(t.name)}
                  onChange={(e) => setPicked((e.target as HTMLInputElement).checked ? [...picked, t.name] : picked.filter((p) => p !== t.name))}
                />
                {t.name}
              </label>
            ))}
          </div>
          <button type="submit">Add endpoint</button>
        </form>
      )}
      <ul class="list" data-testid="endpoints">
        {endpoints.map((ep) => (
          <li>
            <div class="row wrap">
              <span class={`dot ${ep.enabled ? "live" : ""}`} />
              <code class="grow">{ep.url}</code>
              <span class="muted small">{ep.event_types.length ? ep.event_types.join(", ") : "all events"}</span>
              {!ep.enabled && <span class="badge">disabled</span>}
              {ep.failing_since && ep.enabled && <span class="small error">failing since {when(ep.failing_since)}</span>}
              <button class="link" onClick={() => setOpen(open === ep.id ? null : ep.id)}>
                {open === ep.id ? "Hide deliveries" : "Deliveries"}
              </button>
              {admin && (
                <>
                  <button class="link" onClick={() => act(() => api("POST", `/v1/webhooks/endpoints/${ep.id}/test`))}>
                    Send test
                  </button>
                  <button class="link" onClick={() => rotate(ep)}>
                    Rotate secret
                  </button>
                  <button class="link" onClick={() => act(() => api("PATCH", `/v1/webhooks/endpoints/${ep.id}`, { enabled: !ep.enabled }))}>
                    {ep.enabled ? "Disable" : "Enable"}
                  </button>
                  <button
                    class="link danger"
                    onClick={() => confirm(`Delete ${ep.url} and its delivery log?`) && act(() => api("DELETE", `/v1/webhooks/endpoints/${ep.id}`))}
                  >
                    Delete
                  </button>
                </>
              )}
            </div>
            {ep.description && <div class="muted small">{ep.description}</div>}
            {ep.previous_secret_until && <div class="muted small">The previous secret also signs until {when(ep.previous_secret_until)}.</div>}
            {open === ep.id && <Deliveries endpoint={ep} admin={admin} onError={setError} />}
          </li>
        ))}
        {endpoints.length === 0 && <li class="muted">No endpoints.</li>}
      </ul>
    </section>
  );
}

function Deliveries(props: { endpoint: Endpoint; admin: boolean; onError: (s: string) => void }) {
  const [rows, setRows] = useState<Delivery[]>([]);
  const [shown, setShown] = useState<Delivery | null>(null);
  const [since, setSince] = useState("");
  const [until, setUntil] = useState("");
  const [note, setNote] = useState("");
  const load = () =>
    api<{ data: Delivery[] }>("GET", `/v1/webhooks/endpoints/${props.endpoint.id}/deliveries?limit=100`)
      .then((r) => setRows(r.data))
      .catch((e) => props.onError(explain(e)));
  useEffect(() => {
    load();
  }, [props.endpoint.id]);
  const show = (d: Delivery) =>
    api<Delivery>("GET", `/v1/webhooks/deliveries/${d.id}`)
      .then(setShown)
      .catch((e) => props.onError(explain(e)));
  const replay = (d: Delivery) =>
    api("POST", `/v1/webhooks/deliveries/${d.id}/replay`)
      .then(() => {
        setNote(`Delivery ${d.webhook_id} queued again.`);
        load();
      })
      .catch((e) => props.onError(explain(e)));
  const replayRange = (e: Event) => {
    e.preventDefault();
    api<{ replayed: number }>("POST", `/v1/webhooks/endpoints/${props.endpoint.id}/replay`, {
      since: new Date(since).toISOString(),
      until: new Date(until).toISOString(),
    })
      .then((r) => {
        setNote(`${r.replayed} failed deliveries queued again.`);
        load();
      })
      .catch((err) => props.onError(explain(err)));
  };
  return (
    <div class="card" data-testid="deliveries">
      <div class="row wrap">
        <strong class="grow">Delivery log</strong>
        <button class="link" onClick={load}>
          Refresh
        </button>
      </div>
      {note && <p class="muted small">{note}</p>}
      {props.admin && (
        <form class="row wrap small" onSubmit={replayRange}>
          <span class="muted">Replay the failed ones from</span>
          <input type="datetime-local" value={since} required onInput={(e) => setSince((e.target as HTMLInputElement).value)} />
          <span class="muted">to</span>
          <input type="datetime-local" value={until} required onInput={(e) => setUntil((e.target as HTMLInputElement).value)} />
          <button type="submit">Replay range</button>
        </form>
      )}
      <div class="scroll-x">
        <table>
          <thead>
            <tr>
              <th>Made</th>
              <th>Event</th>
              <th>Status</th>
              <th>Attempts</th>
              <th>Last answer</th>
              <th></th>
            </tr>
          </thead>
          <tbody>
            {rows.map((d) => (
              <tr>
                <td class="small">{when(d.created_at)}</td>
                <td>{d.event_type}</td>
                <td data-testid="delivery-status">{d.status}</td>
                <td>{d.attempts}</td>
                <td>{d.last_status ?? "—"}</td>
                <td>
                  <button class="link" onClick={() => show(d)}>
                    Attempts
                  </button>
                  {props.admin && d.status !== "pending" && (
                    <button class="link" onClick={() => replay(d)}>
                      Replay
                    </button>
                  )}
                </td>
              </tr>
            ))}
            {rows.length === 0 && (
              <tr>
                <td colSpan={6} class="muted">
                  Nothing delivered yet.
                </td>
              </tr>
            )}
          </tbody>
        </table>
      </div>
      {shown && (
        <div class="card" data-testid="attempts">
          <div class="row">
            <strong class="grow">
              {shown.event_type} · <code>{shown.webhook_id}</code>
            </strong>
            <button class="link" onClick={() => setShown(null)}>
              Close
            </button>
          </div>
          <ol>
            {(shown.log ?? []).map((a) => (
              <li>
                {when(a.at)}: {a.status ?? "no answer"} in {a.latency_ms} ms{a.error ? ` — ${a.error}` : ""}
                {a.response_excerpt && <pre class="small mono">{a.response_excerpt}</pre>}
              </li>
            ))}
          </ol>
        </div>
      )}
    </div>
  );
}
