// A thread's subagent tree (GET /v1/threads/{id}/tree): each node with its title or alias,
// status, steps, tokens, USD and a live dot; a node opens that thread's chat. Live without
// polling: the tree is read again when the org room reports a turn starting or ending on a
// thread in it, or starting on a new child of one (`turn.started` carries parent_id).
import { useEffect, useRef, useState } from "preact/hooks";
import { api, explain, money } from "../api";
import type { Frame } from "../live";
import { registerThreadTab } from "../panels";
import type { Live } from "../live";
import { Link } from "../router";

interface Node {
  id: string;
  parent_id: string | null;
  alias: string | null;
  title: string | null;
  depth: number;
  status: string;
  steps: number;
  tokens: number;
  usd: string;
  live: boolean;
  result_delivered: boolean;
  children: Node[];
}

function ids(n: Node, into: Set<string>): Set<string> {
  into.add(n.id);
  for (const c of n.children) ids(c, into);
  return into;
}

function count(n: Node): number {
  return n.children.reduce((s, c) => s + count(c), 1);
}

function NodeView(props: { node: Node; current: string }) {
  const n = props.node;
  const name = n.title || n.alias || "Untitled thread";
  return (
    <li>
      <div class="node" data-testid="tree-node" data-node={n.id} data-status={n.status} data-live={n.live ? "1" : "0"}>
        <span class={`dot ${n.live ? "live" : ""}`} title={n.live ? "a turn runs now" : "idle"} />
        {n.id === props.current ? (
          <strong>{name}</strong>
        ) : (
          <Link to={`/threads/${n.id}`} testid="tree-link">
            {name}
          </Link>
        )}
        {n.alias && n.title && <code class="muted">{n.alias}</code>}
        <span class="badge">{n.status}</span>
        <span>
          {n.steps} step{n.steps === 1 ? "" : "s"}
        </span>
        <span>{n.tokens} tokens</span>
        <span>{money(n.usd)}</span>
        {n.parent_id && n.result_delivered && <span class="muted small">result delivered</span>}
      </div>
      {n.children.length > 0 && (
        <ul class="tree">
          {n.children.map((c) => (
            <NodeView node={c} current={props.current} />
          ))}
        </ul>
      )}
    </li>
  );
}

function Tree(props: { threadId: string; live: Live }) {
  const [tree, setTree] = useState<Node | null>(null);
  const [error, setError] = useState("");
  const known = useRef(new Set<string>([props.threadId]));
  const loading = useRef(false);
  const again = useRef(false);
  const reads = useRef(0);

  useEffect(() => {
    let gone = false;
    const load = async () => {
      if (loading.current) {
        again.current = true; // one more read after this one, not one per frame
        return;
      }
      loading.current = true;
      try {
        do {
          again.current = false;
          const r = await api<{ data: Node }>("GET", `/v1/threads/${props.threadId}/tree`);
          reads.current += 1;
          if (gone) return;
          known.current = ids(r.data, new Set());
          setTree(r.data);
          setError("");
        } while (again.current && !gone);
      } catch (e) {
        if (!gone) setError(explain(e));
      } finally {
        loading.current = false;
      }
    };
    load();
    const off = props.live.onOrg((f: Frame) => {
      const d = f.data ?? {};
      if (known.current.has(d.thread_id) || (d.parent_id && known.current.has(d.parent_id))) load();
    });
    // After a reconnect the pushes missed meanwhile are gone: read once more.
    const offStatus = props.live.onStatus((s) => s === "live" && load());
    return () => {
      gone = true;
      off();
      offStatus();
    };
  }, [props.threadId, props.live]);

  if (error) return <p class="error">{error}</p>;
  if (!tree) return <p class="muted">Loading…</p>;
  return (
    <section data-testid="tree" data-nodes={count(tree)} data-reads={reads.current}>
      <p class="muted small">
        {count(tree) === 1
          ? "No subagents yet: they appear here when this thread's model delegates."
          : `${count(tree) - 1} subagent${count(tree) === 2 ? "" : "s"} below this thread. Updated live.`}
      </p>
      <ul class="tree root">
        <NodeView node={tree} current={props.threadId} />
      </ul>
    </section>
  );
}

registerThreadTab({ id: "tree", label: "Tree", component: Tree });
