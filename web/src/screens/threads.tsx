// Threads: live busy state from the org room, filters, and a new thread from a setup.
// Subagent threads are hidden unless asked for (`roots_only` on the list); shown, each says
// which thread spawned it, with a link there.
import { useEffect, useState } from "preact/hooks";
import { api, explain, money, type Who } from "../api";
import type { Live } from "../live";
import { Link, navigate } from "../router";

interface Thread {
  id: string;
  busy?: boolean;
  setup_id: string;
  title: string;
  created_at: string;
  last_seq: number;
  parent_id: string | null;
}
interface Setup {
  id: string;
  name: string;
  model: string;
  provider: string;
}

export function Threads(props: { live: Live; who: Who }) {
  const [threads, setThreads] = useState<Thread[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [setups, setSetups] = useState<Setup[]>([]);
  const [busy, setBusy] = useState<Record<string, boolean>>({});
  const [last, setLast] = useState<Record<string, any>>({});
  const [setupFilter, setSetupFilter] = useState("");
  const [text, setText] = useState("");
  const [busyOnly, setBusyOnly] = useState(false);
  const [children, setChildren] = useState(false);
  const [parents, setParents] = useState<Record<string, string>>({});
  const [error, setError] = useState("");
  const [newSetup, setNewSetup] = useState("");
  const [newTitle, setNewTitle] = useState("");

  const load = async (more = false) => {
    try {
      const q = new URLSearchParams({ limit: "50" });
      if (setupFilter) q.set("setup_id", setupFilter);
      if (!children) q.set("roots_only", "true");
      if (more && cursor) q.set("cursor", cursor);
      const page = await api<{ data: Thread[]; next_cursor: string | null }>("GET", `/v1/threads?${q}`);
      setThreads((old) => (more ? [...old, ...page.data] : page.data));
      // busy as of this read; the org room's pushes keep it current from here on
      setBusy((b) => ({ ...Object.fromEntries(page.data.map((t) => [t.id, !!t.busy])), ...b }));
      setCursor(page.next_cursor);
      setError("");
    } catch (e) {
      setError(explain(e));
    }
  };

  useEffect(() => {
    load();
  }, [setupFilter, children]);
  // The title of each shown child's parent: from the list when it is there, else read once.
  useEffect(() => {
    const known = new Map(threads.map((t) => [t.id, t.title]));
    const missing = [...new Set(threads.map((t) => t.parent_id).filter((p): p is string => !!p && !known.has(p) && !(p in parents)))];
    for (const id of missing)
      api<Thread>("GET", `/v1/threads/${id}`)
        .then((t) => setParents((m) => ({ ...m, [id]: t.title })))
        .catch(() => setParents((m) => ({ ...m, [id]: "" })));
  }, [threads]);
  const parentTitle = (id: string) =>
    threads.find((t) => t.id === id)?.title ?? parents[id] ?? "";
  useEffect(() => {
    api<{ data: Setup[] }>("GET", "/v1/setups")
      .then((r) => {
        setSetups(r.data);
        if (r.data.length) setNewSetup((s) => s || r.data[0].id);
      })
      .catch((e) => setError(explain(e)));
  }, []);
  // Busy/idle and each turn's outcome are pushed to the org room: nothing is polled.
  useEffect(
    () =>
      props.live.onOrg((f) => {
        const id = f.data.thread_id;
        setBusy((b) => ({ ...b, [id]: f.data.busy }));
        if (f.type === "turn.ended") setLast((l) => ({ ...l, [id]: f.data }));
      }),
    [props.live],
  );

  const create = async (e: Event) => {
    e.preventDefault();
    try {
      const t = await api<Thread>("POST", "/v1/threads", { setup_id: newSetup, title: newTitle });
      navigate(`/threads/${t.id}`);
    } catch (err) {
      setError(explain(err));
    }
  };

  const setupName = (id: string) => setups.find((s) => s.id === id)?.name ?? id.slice(0, 8);
  const shown = threads.filter(
    (t) =>
      (!text || t.title.toLowerCase().includes(text.toLowerCase())) && (!busyOnly || busy[t.id]),
  );
  const canWrite = props.who.role !== "viewer";

  return (
    <section>
      <h2>Threads</h2>
      {error && <p class="error" role="alert">{error}</p>}
      {canWrite && (
        <form class="card row wrap" onSubmit={create} data-testid="new-thread">
          {setups.length === 0 ? (
            <span class="muted">
              No setup yet: <Link to="/setups">create one</Link> to start a thread.
            </span>
          ) : (
            <>
              <select value={newSetup} onChange={(e) => setNewSetup((e.target as HTMLSelectElement).value)} name="setup">
                {setups.map((s) => (
                  <option value={s.id}>{s.name} ({s.model})</option>
                ))}
              </select>
              <input
                name="title"
                placeholder="Title (optional)"
                value={newTitle}
                onInput={(e) => setNewTitle((e.target as HTMLInputElement).value)}
              />
              <button type="submit">New thread</button>
            </>
          )}
        </form>
      )}
      <div class="row wrap filters">
        <input placeholder="Filter by title" value={text} onInput={(e) => setText((e.target as HTMLInputElement).value)} />
        <select value={setupFilter} onChange={(e) => setSetupFilter((e.target as HTMLSelectElement).value)}>
          <option value="">All setups</option>
          {setups.map((s) => (
            <option value={s.id}>{s.name}</option>
          ))}
        </select>
        <label class="inline">
          <input type="checkbox" checked={busyOnly} onChange={(e) => setBusyOnly((e.target as HTMLInputElement).checked)} />
          busy only
        </label>
        <label class="inline">
          <input
            type="checkbox"
            name="children"
            checked={children}
            onChange={(e) => setChildren((e.target as HTMLInputElement).checked)}
          />
          show subagent threads
        </label>
      </div>
      <ul class="list" data-testid="threads">
        {shown.map((t) => (
          <li key={t.id} data-thread={t.id}>
            <Link to={`/threads/${t.id}`}>
              <span class={`dot ${busy[t.id] ? "busy" : ""}`} data-testid="busy" data-busy={busy[t.id] ? "1" : "0"} />
              <span class="title">{t.title || "Untitled"}</span>
              <span class="muted small">{setupName(t.setup_id)}</span>
              {t.parent_id && (
                <span class="muted small" data-testid="parent" data-parent={t.parent_id}>
                  subagent of{" "}
                  <span
                    class="parent"
                    role="link"
                    tabIndex={0}
                    data-testid="parent-link"
                    onClick={(e) => {
                      // inside the row's own link: open the parent instead
                      e.preventDefault();
                      e.stopPropagation();
                      navigate(`/threads/${t.parent_id}`);
                    }}
                    onKeyDown={(e) => {
                      if (e.key !== "Enter") return;
                      e.preventDefault();
                      e.stopPropagation();
                      navigate(`/threads/${t.parent_id}`);
                    }}
                  >
                    {parentTitle(t.parent_id) || `thread ${t.parent_id.slice(0, 8)}`}
                  </span>
                </span>
              )}
              {last[t.id] && (
                <span class="muted small">
                  last turn {last[t.id].status} · {money(last[t.id].cost_usd)}
                </span>
              )}
              <span class="muted small right">{new Date(t.created_at).toLocaleString()}</span>
            </Link>
          </li>
        ))}
        {shown.length === 0 && <li class="muted">No threads{text || busyOnly || setupFilter ? " match the filters" : " yet"}.</li>}
      </ul>
      {cursor && (
        <button class="link" onClick={() => load(true)}>
          Load more
        </button>
      )}
    </section>
  );
}
