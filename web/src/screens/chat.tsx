// A thread: its latest page of history (history.ts), older pages read as the reader scrolls
// up, then live from the socket, token by token, tool calls and results as they happen, a stop
// button, and a footer per turn. Items are drawn by messages.tsx.
import { useEffect, useLayoutEffect, useReducer, useRef, useState } from "preact/hooks";
import { api, explain, money, type Who } from "../api";
import { readPage, type Page } from "../history";
import type { Frame, Live } from "../live";
import { Markdown } from "../markdown";
import { threadTabs, turnActions } from "../panels";
import { Link } from "../router";
import { childResults, ItemView, type Item } from "./messages";

interface LiveTool {
  id: string;
  name: string;
  input: string;
}

interface State {
  items: Item[];
  busyTurn: string | null;
  // Streamed steps not yet persisted: the last one is in progress.
  steps: { text: string; tools: LiveTool[] }[];
  increments: number; // delta batches received (shown to tests as data-increments)
  loaded: boolean; // the latest page is in
  hasOlder: boolean; // events before the oldest shown exist
  oldest: number | null; // seq of the oldest event read
}

const initial: State = {
  items: [], busyTurn: null, steps: [{ text: "", tools: [] }], increments: 0, loaded: false, hasOlder: false, oldest: null,
};

// A frame from the socket, or a page of history: the latest (then followed live) or an older
// one (put before the rest).
type Action = { frame: Frame } | { page: Page; older: boolean; busy: boolean };

function userText(data: any): string {
  if (typeof data?.content === "string") return data.content;
  if (Array.isArray(data?.content)) return data.content.map((b: any) => b.text ?? "").join("");
  return String(data?.text ?? "");
}

function reduce(s: State, a: Action): State {
  if ("frame" in a) return reduceFrame(s, a.frame);
  const oldest = a.page.firstSeq ?? s.oldest;
  if (a.older) {
    const older = a.page.frames.reduce(reduceFrame, initial).items;
    return { ...s, items: [...older, ...s.items], hasOlder: a.page.hasOlder, oldest };
  }
  const read = a.page.frames.reduce(reduceFrame, s);
  // A turn that started before this page still runs: the thread says it is busy.
  const busyTurn = read.busyTurn ?? (a.busy ? "running" : null);
  return { ...read, busyTurn, loaded: true, hasOlder: a.page.hasOlder, oldest };
}

function reduceFrame(s: State, f: Frame): State {
  if (f.type === "delta") {
    const steps = s.steps.map((st) => ({ text: st.text, tools: [...st.tools] }));
    for (const d of f.data.deltas ?? []) {
      const cur = steps[steps.length - 1];
      if (d.type === "TextDelta") cur.text += d.text ?? "";
      else if (d.type === "ToolUseStart") cur.tools.push({ id: d.id, name: d.name, input: "" });
      else if (d.type === "ToolInputDelta") {
        const t = cur.tools.find((x) => x.id === d.id);
        if (t) t.input += d.partial_json ?? "";
      } else if (d.type === "MessageStop") steps.push({ text: "", tools: [] });
    }
    return { ...s, steps, increments: s.increments + 1, busyTurn: s.busyTurn ?? f.data.deltas?.[0]?.turn_id ?? null };
  }
  const e = f.data;
  const seq = f.seq ?? 0;
  switch (f.type) {
    case "message":
      return { ...s, items: [...s.items, { kind: "user", seq, text: userText(e.data) }] };
    case "notification":
      return { ...s, items: [...s.items, { kind: "note", seq, text: userText(e.data) || JSON.stringify(e.data), data: e.data }] };
    case "assistant": {
      // The persisted step replaces the oldest streamed one.
      const steps = s.steps.length > 1 ? s.steps.slice(1) : [{ text: "", tools: [] }];
      return { ...s, steps, items: [...s.items, { kind: "assistant", seq, turn: e.turn_id, blocks: e.data?.content ?? [] }] };
    }
    case "tool_results":
      return { ...s, items: [...s.items, { kind: "results", seq, results: e.data?.results ?? [] }] };
    case "turn_started":
      return { ...s, busyTurn: e.data?.turn_id ?? e.turn_id, steps: [{ text: "", tools: [] }] };
    case "turn_ended":
      return {
        ...s,
        busyTurn: null,
        steps: [{ text: "", tools: [] }],
        items: [...s.items, { kind: "ended", seq, data: { ...e.data, turn_id: e.data?.turn_id ?? e.turn_id } }],
      };
    default:
      return s;
  }
}

export function Footer(props: { data: any; threadId: string }) {
  const d = props.data;
  const u = d.usage ?? {};
  const ok = d.status === "done" || d.status === "waiting";
  const held: any[] = d.held ?? [];
  return (
    <div class={`footer ${ok ? "" : "bad"}`} data-testid="turn-footer" data-status={d.status}>
      <span class="badge">{d.status}</span>
      <span>{d.stop_reason}</span>
      <span>
        {d.steps ?? 0} step{d.steps === 1 ? "" : "s"}
      </span>
      <span title="input / output tokens">
        {u.input_tokens ?? 0} in / {u.output_tokens ?? 0} out
      </span>
      <span title="prompt cache read / write tokens">
        cache {u.cache_read_tokens ?? 0} read / {u.cache_write_tokens ?? 0} write
      </span>
      <span>{money(d.cost_usd)}</span>
      {u.reported === false && <span class="muted">usage not reported by the provider</span>}
      {d.error && <span class="error">{d.error}</span>}
      {held.length > 0 && (
        <Link to="/approvals" testid="held-link">
          {held.map((h) => h.name).join(", ")} held for a person's approval
        </Link>
      )}
      {turnActions.map((a) => (
        <a.component turnId={d.turn_id} threadId={props.threadId} />
      ))}
    </div>
  );
}

function Turns(props: { threadId: string; version: number }) {
  const [turns, setTurns] = useState<any[] | null>(null);
  const [error, setError] = useState("");
  useEffect(() => {
    api<{ data: any[] }>("GET", `/v1/threads/${props.threadId}/turns?limit=200`)
      .then((r) => setTurns(r.data))
      .catch((e) => setError(explain(e)));
  }, [props.threadId, props.version]); // re-read when a turn ends (a pushed event), never on a timer
  if (error) return <p class="error">{error}</p>;
  if (!turns) return <p class="muted">Loading…</p>;
  return (
    <div class="scroll-x">
      <table data-testid="turns">
        <thead>
          <tr>
            <th>Started</th>
            <th>Status</th>
            <th>Stop reason</th>
            <th>Steps</th>
            <th>Tokens in/out</th>
            <th>Cache r/w</th>
            <th>USD</th>
            {turnActions.length > 0 && <th />}
          </tr>
        </thead>
        <tbody>
          {turns.map((t) => (
            <tr key={t.id}>
              <td>{new Date(t.started_at).toLocaleString()}</td>
              <td>{t.status}</td>
              <td>{t.stop_reason ?? "—"}</td>
              <td>{t.steps}</td>
              <td>
                {t.usage.input_tokens}/{t.usage.output_tokens}
              </td>
              <td>
                {t.usage.cache_read_tokens}/{t.usage.cache_write_tokens}
              </td>
              <td>{money(t.cost_usd)}</td>
              {turnActions.length > 0 && (
                <td>
                  {turnActions.map((a) => (
                    <a.component turnId={t.id} threadId={props.threadId} />
                  ))}
                </td>
              )}
            </tr>
          ))}
          {turns.length === 0 && (
            <tr>
              <td colSpan={7 + (turnActions.length > 0 ? 1 : 0)} class="muted">
                No turns yet.
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </div>
  );
}

const NEAR_BOTTOM_PX = 120;

function atBottom(): boolean {
  const el = document.documentElement;
  return window.innerHeight + window.scrollY >= el.scrollHeight - NEAR_BOTTOM_PX;
}

export function Chat(props: { threadId: string; live: Live; who: Who }) {
  const [state, dispatch] = useReducer(reduce, initial);
  const [thread, setThread] = useState<any>(null);
  const [text, setText] = useState("");
  const [error, setError] = useState("");
  const [tab, setTab] = useState("chat");
  const [ended, setEnded] = useState(0);
  const bottom = useRef<HTMLDivElement>(null);
  const top = useRef<HTMLDivElement>(null);
  const list = useRef<HTMLDivElement>(null);
  const stick = useRef(true); // the reader is at the bottom: follow new items there
  const prepended = useRef<number | null>(null); // page height before an older page went in
  const loadingOlder = useRef(false);

  useEffect(() => {
    let gone = false;
    let unfollow = () => {};
    (async () => {
      const t = await api<any>("GET", `/v1/threads/${props.threadId}`);
      if (gone) return;
      setThread(t);
      const page = await readPage(props.threadId, null, t.last_seq);
      if (gone) return;
      dispatch({ page, older: false, busy: !!t.busy });
      // Live from what the page showed: the socket replays only what came after it.
      unfollow = props.live.follow(props.threadId, t.last_seq, (frame) => {
        dispatch({ frame });
        if (frame.type === "turn_ended") setEnded((n) => n + 1);
      });
    })().catch((e) => setError(explain(e)));
    return () => {
      gone = true;
      unfollow();
    };
  }, [props.threadId, props.live]);

  const loadOlder = async () => {
    if (loadingOlder.current || !state.hasOlder || state.oldest === null) return;
    loadingOlder.current = true;
    try {
      const page = await readPage(props.threadId, state.oldest, 0);
      prepended.current = document.documentElement.scrollHeight;
      dispatch({ page, older: true, busy: false });
    } catch (e) {
      setError(explain(e));
    } finally {
      loadingOlder.current = false;
    }
  };

  // Older pages load when the top of the conversation comes into view.
  useEffect(() => {
    const el = top.current;
    if (!el || !state.hasOlder || tab !== "chat") return;
    const seen = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) loadOlder();
    });
    seen.observe(el);
    return () => seen.disconnect();
  }, [state.hasOlder, state.oldest, tab]);

  // Content that grows by itself (the markdown renderer arriving, a long reply re-wrapping)
  // keeps a reader who was at the bottom there.
  useEffect(() => {
    const el = list.current;
    if (!el || tab !== "chat") return;
    const grown = new ResizeObserver(() => {
      if (stick.current && prepended.current === null) window.scrollTo(0, document.documentElement.scrollHeight);
    });
    grown.observe(el);
    return () => grown.disconnect();
  }, [tab]);

  useEffect(() => {
    const onScroll = () => (stick.current = atBottom());
    window.addEventListener("scroll", onScroll, { passive: true });
    return () => window.removeEventListener("scroll", onScroll);
  }, []);

  // Before paint: an older page keeps what the reader looks at in place; anything newer
  // scrolls into view only for a reader who was at the bottom.
  useLayoutEffect(() => {
    if (prepended.current !== null) {
      window.scrollBy(0, document.documentElement.scrollHeight - prepended.current);
      prepended.current = null;
    } else if (stick.current && bottom.current) {
      // the very end of the page: the sticky composer must not cover the last item
      window.scrollTo(0, document.documentElement.scrollHeight);
    }
  }, [state]);

  const send = async (e: Event) => {
    e.preventDefault();
    if (!text.trim()) return;
    try {
      await props.live.command("send", { thread_id: props.threadId, text, client_message_id: crypto.randomUUID() });
      setText("");
      setError("");
    } catch (err) {
      setError(explain(err));
    }
  };
  const stop = async () => {
    try {
      await props.live.command("stop", { thread_id: props.threadId });
    } catch (err) {
      setError(explain(err));
    }
  };

  const streaming = state.steps.filter((s) => s.text || s.tools.length);
  const results = childResults(state.items);
  const canWrite = props.who.role !== "viewer";
  return (
    <section class="chat">
      <div class="row wrap">
        <Link to="/">← Threads</Link>
        <h2 class="grow">{thread?.title || "Untitled thread"}</h2>
        <span data-testid="thread-state" data-busy={state.busyTurn ? "1" : "0"} class={`dot ${state.busyTurn ? "busy" : ""}`}>
          {state.busyTurn ? "running" : "idle"}
        </span>
      </div>
      <div class="tabs">
        {[{ id: "chat", label: "Chat" }, { id: "turns", label: "Turns" }, ...threadTabs].map((t) => (
          <button class={tab === t.id ? "tab active" : "tab"} onClick={() => setTab(t.id)}>
            {t.label}
          </button>
        ))}
      </div>
      {error && <p class="error" role="alert">{error}</p>}
      {tab === "turns" && <Turns threadId={props.threadId} version={ended} />}
      {threadTabs.map((t) => tab === t.id && <t.component threadId={props.threadId} live={props.live} who={props.who} />)}
      {tab === "chat" && (
        <>
          <div class="messages" ref={list} data-testid="messages" data-loaded={state.loaded ? "1" : "0"}>
            <div ref={top} class="older" data-testid="older">
              {state.hasOlder && (
                <button class="link" onClick={loadOlder} data-testid="load-older">
                  Earlier messages
                </button>
              )}
            </div>
            {state.items.map((it) =>
              it.kind === "ended" ? <Footer data={it.data} threadId={props.threadId} /> : <ItemView item={it} results={results} />,
            )}
            {streaming.map((s) => (
              <div class="msg assistant streaming" data-testid="streaming" data-increments={state.increments}>
                {s.text && <Markdown text={s.text} />}
                {s.tools.map((t) => (
                  <div class="tool">
                    ⚙ {t.name} <code>{t.input}</code>
                  </div>
                ))}
              </div>
            ))}
            {state.loaded && state.items.length === 0 && !streaming.length && <p class="muted">No messages yet. Say something.</p>}
            <div ref={bottom} />
          </div>
          {canWrite && (
            <form class="composer" onSubmit={send}>
              <textarea
                name="message"
                rows={2}
                placeholder="Message"
                value={text}
                onInput={(e) => setText((e.target as HTMLTextAreaElement).value)}
                onKeyDown={(e) => {
                  if (e.key === "Enter" && !e.shiftKey) send(e);
                }}
              />
              {state.busyTurn ? (
                <button type="button" class="danger" onClick={stop} data-testid="stop">
                  Stop
                </button>
              ) : null}
              <button type="submit" disabled={!text.trim()}>
                Send
              </button>
            </form>
          )}
        </>
      )}
    </section>
  );
}
