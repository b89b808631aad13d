// How each item of a chat looks: a user's text as typed, a reply as markdown (markdown.tsx),
// tool calls and results, and subagents as cards — a spawn's result (`agent_spawn`'s JSON) and
// the child's result in the parent's chat (a `notification` whose data carries `subagent`),
// each with the child's title, status, cost and a link to its chat.
import { money } from "../api";
import { Markdown } from "../markdown";
import { Link } from "../router";

export type Item =
  | { kind: "user"; seq: number; text: string }
  | { kind: "assistant"; seq: number; turn: string | null; blocks: any[] }
  | { kind: "results"; seq: number; results: any[] }
  | { kind: "note"; seq: number; text: string; data: any }
  | { kind: "ended"; seq: number; data: any };

interface Child {
  id: string;
  alias?: string;
  title?: string;
  status?: string;
  usd?: string;
  steps?: number;
  duration_s?: number;
  reason?: string | null;
}

/** Each child's reported result in `items`, by child id (what a spawn card shows once known). */
export function childResults(items: Item[]): Map<string, Child> {
  const out = new Map<string, Child>();
  for (const it of items) if (it.kind === "note" && it.data?.subagent?.id) out.set(it.data.subagent.id, it.data.subagent);
  return out;
}

function resultText(content: any): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((b: any) => b.text ?? JSON.stringify(b)).join(" ");
  return JSON.stringify(content);
}

/** `agent_spawn`'s result, when it is the JSON of a spawned child. */
function spawned(r: any): Child | null {
  if (r.name !== "agent_spawn" || r.is_error) return null;
  try {
    const v = JSON.parse(resultText(r.content));
    return typeof v?.id === "string" && /^[0-9a-f-]{36}$/.test(v.id) ? v : null;
  } catch {
    return null;
  }
}

/** The child's text inside ator's `<subagent_result …>` element (the attributes are in data). */
function resultBody(text: string): string {
  const lines = text.split("\n");
  if (lines[0]?.startsWith("<subagent_result")) lines.shift();
  if (lines[lines.length - 1]?.trim() === "</subagent_result>") lines.pop();
  return lines.join("\n");
}

function ChildCard(props: { kind: "spawn" | "result"; child: Child; result?: Child; body?: string }) {
  const c = props.child;
  const known = props.result ?? (props.kind === "result" ? c : undefined);
  const status = known?.status ?? "spawned"; // no result yet: it runs, or was stopped
  const ok = status === "done" || status === "spawned";
  return (
    <div class={`subagent ${ok ? "" : "bad"}`} data-testid="subagent-card" data-kind={props.kind} data-child={c.id} data-status={status}>
      <div class="row wrap small">
        <span class="muted">{props.kind === "spawn" ? "Subagent started" : "Subagent result"}</span>
        <Link to={`/threads/${c.id}`} testid="subagent-link">
          {c.title || c.alias || "subagent"}
        </Link>
        {c.alias && c.title && <code class="muted">{c.alias}</code>}
        <span class="badge">{status}</span>
        {known?.reason && <span class="muted">{known.reason}</span>}
        {known && <span data-testid="subagent-cost">{money(known.usd)}</span>}
        {known?.steps !== undefined && (
          <span class="muted">
            {known.steps} step{known.steps === 1 ? "" : "s"}
          </span>
        )}
        {known?.duration_s !== undefined && <span class="muted">{Number(known.duration_s).toFixed(1)} s</span>}
      </div>
      {props.body && <Markdown text={props.body} class="subagent-body" />}
    </div>
  );
}

export function ItemView(props: { item: Item; results: Map<string, Child> }) {
  const it = props.item;
  if (it.kind === "user")
    return (
      <div class="msg user" data-seq={it.seq} data-testid="user-message">
        {it.text}
      </div>
    );
  if (it.kind === "note") {
    const child: Child | undefined = it.data?.subagent;
    if (child?.id)
      return (
        <div class="msg card-msg" data-seq={it.seq}>
          <ChildCard kind="result" child={child} body={resultBody(String(it.data?.text ?? ""))} />
        </div>
      );
    return (
      <div class="msg note" data-seq={it.seq}>
        {it.text}
      </div>
    );
  }
  if (it.kind === "assistant")
    return (
      <div class="msg assistant" data-seq={it.seq} data-testid="assistant-message">
        {it.blocks.map((b) =>
          b.type === "text" ? (
            <Markdown text={b.text ?? ""} />
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
        {it.results.map((r) => {
          const child = spawned(r);
          if (child) return <ChildCard kind="spawn" child={child} result={props.results.get(child.id)} />;
          return (
            <div class={`tool result ${r.is_error ? "bad" : ""}`} data-testid="tool-result">
              ↳ {r.name ?? "tool"}: <code>{resultText(r.content).slice(0, 2000)}</code>
            </div>
          );
        })}
      </div>
    );
  return null;
}
