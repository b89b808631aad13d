// Approvals: the org's pending tool calls, each with its arguments (editable before approving)
// and approve/deny. Live with no polling: a turn that ends holding calls (`turn.ended` with
// `held`) and a decision made anywhere (`approval.decided`) arrive in the org room; the list is
// read again only then. Decisions go over the socket (`decide`, acknowledged).
import { useEffect, useState } from "preact/hooks";
import { api, explain, type Who } from "../api";
import type { Frame, Live } from "../live";
import { Link } from "../router";

interface Approval {
  id: string;
  name: string;
  status: string;
  thread_id: string | null;
  arguments: Record<string, unknown>;
  subject: { origin?: string; description?: string };
  created_at: string;
  expires_at: string | null;
}

export function Approvals(props: { live: Live; who: Who }) {
  const [items, setItems] = useState<Approval[]>([]);
  const [error, setError] = useState("");
  const [loaded, setLoaded] = useState(false);

  const load = async () => {
    try {
      const page = await api<{ data: Approval[] }>("GET", "/v1/approvals?limit=200");
      setItems(page.data);
      setError("");
    } catch (e) {
      setError(explain(e));
    }
    setLoaded(true);
  };

  useEffect(() => {
    load();
    return props.live.onOrg((f: Frame) => {
      if (f.type === "approval.decided") {
        setItems((old) => old.filter((a) => a.id !== f.data.id));
      } else if (f.type === "turn.ended" && (f.data.held ?? []).length > 0) {
        load();
      }
    });
  }, []);

  const canDecide = props.who.role !== "viewer";
  return (
    <section data-testid="approvals">
      <h2>Pending approvals</h2>
      <p class="muted small">
        Tool calls held for a person's decision. Approving runs the call once and the
        conversation continues with its result; denying tells the model why.
      </p>
      {error && <p class="error">{error}</p>}
      {loaded && !items.length && !error && (
        <p class="muted" data-testid="approvals-empty">
          Nothing is waiting for a decision.
        </p>
      )}
      {items.map((a) => (
        <Pending key={a.id} item={a} live={props.live} canDecide={canDecide} />
      ))}
    </section>
  );
}

function Pending(props: { item: Approval; live: Live; canDecide: boolean }) {
  const a = props.item;
  const [args, setArgs] = useState(JSON.stringify(a.arguments, null, 2));
  const [reason, setReason] = useState("");
  const [error, setError] = useState("");
  const [sending, setSending] = useState(false);

  const decide = async (decision: "approve" | "deny") => {
    const payload: Record<string, unknown> = { approval_id: a.id, decision };
    if (decision === "approve") {
      let edited: unknown;
      try {
        edited = JSON.parse(args);
      } catch {
        setError("The arguments are not valid JSON.");
        return;
      }
      if (JSON.stringify(edited) !== JSON.stringify(a.arguments)) payload.arguments = edited;
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
    <div class="card" data-testid={`approval-${a.id}`}>
      <div>
        <strong data-testid="approval-tool">{a.name}</strong>{" "}
        <span class="muted small">{a.subject?.origin ?? ""}</span>
        {a.thread_id && (
          <>
            {" · "}
            <Link to={`/threads/${a.thread_id}`}>conversation</Link>
          </>
        )}
      </div>
      <div class="muted small">
        asked {new Date(a.created_at).toLocaleString()}
        {a.expires_at && ` · denied by timeout if undecided by ${new Date(a.expires_at).toLocaleString()}`}
      </div>
      <textarea
        data-testid="approval-arguments"
        rows={4}
        style="width: 100%; font-family: monospace"
        value={args}
        disabled={!props.canDecide}
        onInput={(e) => setArgs((e.target as HTMLTextAreaElement).value)}
      />
      {props.canDecide ? (
        <div class="row">
          <button data-testid="approve" disabled={sending} onClick={() => decide("approve")}>
            Approve
          </button>
          <input
            data-testid="deny-reason"
            placeholder="reason (for a denial)"
            value={reason}
            onInput={(e) => setReason((e.target as HTMLInputElement).value)}
          />
          <button data-testid="deny" class="danger" disabled={sending} onClick={() => decide("deny")}>
            Deny
          </button>
        </div>
      ) : (
        <p class="muted small">Viewers cannot decide.</p>
      )}
      {error && <p class="error">{error}</p>}
    </div>
  );
}
