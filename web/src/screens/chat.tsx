// A thread: the conversation replayed and then live from the socket, token by token, tool
// calls and results as they happen, a stop button, and a footer per turn.
import { useEffect, useReducer, useRef, useState } from "preact/hooks";
import { api, explain, money, type Who } from "../api";
import type { Frame, Live } from "../live";
import { threadTabs, turnActions } from "../panels";
import { Link } from "../router";

type Item =
  | { kind: "user"; seq: number; text: string }
  | { kind: "assistant"; seq: number; turn: string | null; blocks: any[] }
  | { kind: "results"; seq: number; results: any[] }
  | { kind: "note"; seq: number; text: string }
  | { kind: "ended"; seq: number; data: any };

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
}

const initial: State = { items: [], busyTurn: null, steps: [{ text: "", tools: [] }], increments: 0 };

function userText(data: any): string {
  if (typeof data?.content === "string") return data.content;
  if (Array.isArray(data?.content)) return data.content.map((b: any) => b.text ?? "").join("");
  return String(data?.text ?? "");
}

function reduce(s: State, f: Frame): State {
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
      return { ...s, items: [...s.items, { kind: "note", seq, text: userText(e.data) || JSON.stringify(e.data) }] };
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

function resultText(content: any): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((b: any) => b.text ?? JSON.stringify(b)).join(" ");
  return JSON.stringify(content);
}

export function Footer(props: { data: any; threadId: string }) {
  const d = props.data;
  const u = d.usage ?? {};
  const ok = d.status === "done";
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

export function Chat(props: { threadId: string; live: Live; who: Who }) {
  const [state, dispatch] = useReducer(reduce, initial);
  const [thread, setThread] = useState<any>(null);
  const [text, setText] = useState("");
  const [error, setError] = useState("");
  const [tab, setTab] = useState("chat");
  const [ended, setEnded] = useState(0);
  const bottom = useRef<HTMLDivElement>(null);

  useEffect(() => {
    api("GET", `/v1/threads/${props.threadId}`)
      .then(setThread)
      .catch((e) => setError(explain(e)));
    return props.live.follow(props.threadId, 0, (f) => {
      dispatch(f);
      if (f.type === "turn_ended") setEnded((n) => n + 1);
    });
  }, [props.threadId, props.live]);

  useEffect(() => bottom.current?.scrollIntoView({ block: "end" }), [state]);

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
          <div class="messages" data-testid="messages">
            {state.items.map((it) => {
              if (it.kind === "user")
                return (
                  <div class="msg user" data-seq={it.seq} data-testid="user-message">
                    {it.text}
                  </div>
                );
              if (it.kind === "note")
                return (
                  <div class="msg note" data-seq={it.seq}>
                    {it.text}
                  </div>
                );
              if (it.kind === "assistant")
                return (
                  <div class="msg assistant" data-seq={it.seq} data-testid="assistant-message">
                    {it.blocks.map((b) =>
                      b.type === "text" ? (
                        <p>{b.text}</p>
                      ) : b.type === "tool_use" ? (
                        <div class="tool" data-testid="tool-call">
                          ⚙ {b.name} <code>{JSON.stringify(b.input)}</code>
                        </div>
                      ) : b.type === "native_tool_call" ? (
                        <div class="tool" data-testid="native-tool-call" title="run by the provider">
                          ⚙ {b.name} (provider) <code>{JSON.stringify(b.input)}</code>
                        </div>
                      ) : b.type === "native_tool_result" ? (
                        <div class={`tool result ${b.is_error ? "bad" : ""}`} data-testid="native-tool-result">
                          ↳ <code>{resultText(b.content).slice(0, 2000)}</code>
                        </div>
                      ) : null,
                    )}
                  </div>
                );
              if (it.kind === "results")
                return (
                  <div class="msg results" data-seq={it.seq}>
                    {it.results.map((r) => (
                      <div class={`tool result ${r.is_error ? "bad" : ""}`} data-testid="tool-result">
                        ↳ {r.name ?? "tool"}: <code>{resultText(r.content).slice(0, 2000)}</code>
                      </div>
                    ))}
                  </div>
                );
              return <Footer data={it.data} threadId={props.threadId} />;
            })}
            {streaming.map((s) => (
              <div class="msg assistant streaming" data-testid="streaming" data-increments={state.increments}>
                {s.text && <p>{s.text}</p>}
                {s.tools.map((t) => (
                  <div class="tool">
                    ⚙ {t.name} <code>{t.input}</code>
                  </div>
                ))}
              </div>
            ))}
            {state.items.length === 0 && !streaming.length && <p class="muted">No messages yet. Say something.</p>}
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
