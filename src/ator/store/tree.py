"""Subagent trees: spawning a child, pushing its result to the parent exactly once, stopping
a subtree, and reading a tree (layer: store; imports sqlalchemy, ator.store.*,
security.untrusted).

A child is a thread with `parent_id`, `root_id`, `depth`, an `alias`, the parent's tool-use
id that spawned it (`spawned_by`, unique per parent) and its delegation `contract`.

- `spawn`      one transaction, serialized per tree (an advisory lock on the root): the
               child made by the same tool-use id is returned as it is; otherwise the caps
               are checked (depth, width, live children, tree budget) and the child thread
               and its first mailbox item are inserted together.
- `ResultPart` a step part for a child's final write: it inserts the one result item into
               the parent's mailbox (only when the child's mailbox is empty, none of its
               own children is still running, and nothing above it was cancelled), in the
               turn's own statement. The item's client id `subagent:<child id>` is unique
               per parent mailbox: that insert is the claim, so a parent is told once.
- `cancel`     marks a subtree cancelled and drops results still pending from it.
- `RESULT_SQL` is shared with the reaper's sweep (store/turns.py), which tells the parent
               of a lost child in the statement that closes the child's turn's log.
"""

from __future__ import annotations

import html
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ClassVar
from uuid import UUID

import sqlalchemy as sa

from ator import jsonenc
from ator.errors import NotFound, ValidationFailed
from ator.security.untrusted import neutralize
from ator.store import mailbox
from ator.store.database import Database
from ator.store.parts import PartSql
from ator.store.records import TreeNode as Node
from ator.store.scope import Scope

__all__ = [
    "PAGE_CHARS",
    "RESULT_CMID",
    "RESULT_SQL",
    "SUMMARY_CHARS",
    "TURN_SQL",
    "ParentInfo",
    "Refused",
    "ResultPart",
    "Spawned",
    "TreeCaps",
    "TreeSpend",
    "cancel",
    "child",
    "final_text",
    "live",
    "parent_info",
    "pending_results",
    "render",
    "result_params",
    "set_org_caps",
    "spawn",
    "spend",
    "status_of_turn",
    "tell_idle",
    "told",
    "tree",
]

RESULT_CMID = "subagent:"  # + the child's id: the parent's mailbox holds one per child


@dataclass(frozen=True, slots=True)
class TreeCaps:
    depth: int
    width: int
    live: int
    tokens: int
    usd: Decimal


@dataclass(frozen=True, slots=True)
class ParentInfo:
    thread_id: UUID
    setup_id: UUID
    root_id: UUID
    depth: int
    setup_caps: dict[str, Any]
    org_caps: dict[str, Any]
    contract: dict[str, Any] | None
    setup_policy: dict[str, Any] | None = None  # the parent's setup's tool policy


@dataclass(frozen=True, slots=True)
class Spawned:
    id: UUID
    alias: str
    created: bool  # False: this tool-use id had already spawned it


@dataclass(frozen=True, slots=True)
class Refused:
    cap: str  # depth, width, live, tree_tokens, tree_usd
    limit: Any
    current: Any


@dataclass(frozen=True, slots=True)
class TreeSpend:
    """What a child and its whole tree (descendants of the root) have used so far: settled
    cost only. A reservation of a call in flight is not spend (the org ledger holds it only
    for orgs with a monthly budget); the caller checks the call at hand against what is
    left, as the ledger does."""

    steps: int
    tokens: int
    usd: Decimal
    tree_tokens: int
    tree_usd: Decimal
    contract: dict[str, Any]


async def parent_info(db: Database, scope: Scope, thread_id: UUID) -> ParentInfo:
    stmt = sa.text("""
        SELECT t.id, t.setup_id, COALESCE(t.root_id, t.id) AS root_id, t.depth, t.contract,
               COALESCE(s.config -> 'caps', '{}'::jsonb) AS setup_caps,
               COALESCE(o.settings -> 'caps', '{}'::jsonb) AS org_caps,
               s.tool_policy AS setup_policy
          FROM threads t JOIN setups s ON s.id = t.setup_id JOIN orgs o ON o.id = t.org_id
         WHERE t.id = :id AND t.org_id = :org_id AND t.deleted_at IS NULL
    """)
    rows = await db.fetch(stmt, {"id": thread_id, "org_id": scope.org_id}, write=False)
    if not rows:
        raise NotFound("thread not found")
    r = rows[0]
    return ParentInfo(r["id"], r["setup_id"], r["root_id"], r["depth"],
                      dict(r["setup_caps"]), dict(r["org_caps"]), r["contract"],
                      r["setup_policy"])


_TREE_SPEND = """
SELECT COALESCE(sum(u.input_tokens + u.output_tokens + u.cache_read_tokens
                    + u.cache_write_tokens), 0) AS tokens,
       COALESCE(sum(u.cost_usd), 0) AS usd
  FROM threads d JOIN turns u ON u.thread_id = d.id AND u.org_id = d.org_id
 WHERE d.root_id = :root_id AND d.org_id = :org_id AND d.parent_id IS NOT NULL
"""


async def spawn(
    db: Database,
    scope: Scope,
    parent: ParentInfo,
    *,
    tool_use_id: str,
    setup_id: UUID | None,
    title: str,
    contract: dict[str, Any],
    message: str,
    caps: TreeCaps,
) -> Spawned | Refused:
    """Create the child (thread + first mailbox item) in one transaction, or return the one
    this tool-use id already created, or say which cap refuses it. Raises ValidationFailed
    (`invalid_setup`) for a setup that is not this org's or is archived."""
    child_id = uuid.uuid4()
    alias = f"sa-{child_id.hex[:6]}"
    params = {"org_id": scope.org_id, "parent_id": parent.thread_id, "root_id": parent.root_id,
              "tuid": tool_use_id}
    async with db.begin() as conn:
        # Spawns of one tree serialize here, so two cannot both pass a cap that fits one.
        await conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtextextended("
                                   "CAST(CAST(:root_id AS uuid) AS text), 7))"), params)
        found = (await conn.execute(sa.text(
            "SELECT id, alias FROM threads WHERE parent_id = :parent_id AND org_id = :org_id"
            " AND spawned_by = :tuid"), params)).first()
        if found is not None:
            return Spawned(found.id, found.alias, created=False)
        if parent.depth + 1 > caps.depth:
            return Refused("depth", caps.depth, parent.depth + 1)
        counts = (await conn.execute(sa.text(f"""
            SELECT (SELECT count(*) FROM threads WHERE parent_id = :parent_id
                       AND org_id = :org_id) AS width,
                   (SELECT count(*) FROM threads d WHERE d.root_id = :root_id
                       AND d.org_id = :org_id AND d.parent_id IS NOT NULL
                       AND {live("d")}) AS live,
                   spent.tokens, spent.usd
              FROM ({_TREE_SPEND}) spent"""), params)).one()
        if counts.width >= caps.width:
            return Refused("width", caps.width, counts.width)
        if counts.live >= caps.live:
            return Refused("live", caps.live, counts.live)
        if counts.tokens >= caps.tokens:
            return Refused("tree_tokens", caps.tokens, int(counts.tokens))
        if Decimal(counts.usd) >= caps.usd:
            return Refused("tree_usd", caps.usd, Decimal(counts.usd))
        inserted = (await conn.execute(sa.text("""
            INSERT INTO threads (id, org_id, setup_id, created_by, title, instructions,
                                 parent_id, root_id, depth, alias, spawned_by, contract)
            SELECT :id, s.org_id, s.id, :user_id, :title, '', :parent_id, :root_id, :depth,
                   :alias, :tuid, CAST(:contract AS jsonb)
              FROM setups s
             WHERE s.id = :setup_id AND s.org_id = :org_id AND s.archived_at IS NULL
            RETURNING id"""), {
            **params, "id": child_id, "user_id": scope.user_id, "title": title,
            "depth": parent.depth + 1, "alias": alias,
            "setup_id": setup_id or parent.setup_id,
            "contract": jsonenc.dumps({**contract, "alias": alias}),
        })).first()
        if inserted is None:
            raise ValidationFailed("setup not found or archived", code="invalid_setup")
        await conn.execute(sa.text("""
            INSERT INTO mailbox (id, org_id, thread_id, client_message_id, kind, content)
            VALUES (:id, :org_id, :thread_id, 'spawn', 'message', CAST(:content AS jsonb))"""), {
            "id": uuid.uuid4(), "org_id": scope.org_id, "thread_id": child_id,
            "content": jsonenc.dumps({"role": "user",
                                      "content": [{"type": "text", "text": message}]}),
        })
    return Spawned(child_id, alias, created=True)


# What the parent is told --------------------------------------------------------------
#
# The item's `text` is the child's final text, capped at SUMMARY_CHARS, inside a
# `<subagent_result …>` element whose attributes ator writes; in the child's text, what could
# pass for that element's end, the untrusted-data wrapper or a role marker is neutralized.
# The history wraps the whole item as untrusted data (agent.history.injected_blocks).

SUMMARY_CHARS = 4_000  # what the parent reads at once; agent_result pages through the rest
PAGE_CHARS = 16_000
TAGS = ("subagent_result", "untrusted-data")


def status_of_turn(status: str, stop_reason: str) -> tuple[str, str | None]:
    """The result status (`done`, `errored`, `cancelled`, `budget`) and, when not done, the
    reason, from how the child's turn ended (outcome.py statuses)."""
    if status == "done":
        return "done", None
    if status == "budget":
        return "budget", stop_reason
    if status == "stopped":
        return "cancelled", stop_reason.split(":", 1)[-1]
    if status == "lost":
        return "errored", "lost"
    return "errored", stop_reason.removeprefix("error:")


def render(
    *, child_id: UUID, alias: str, title: str, status: str, reason: str | None, steps: int,
    tokens: int, usd: Decimal, text: str, error: str | None,
) -> tuple[dict[str, Any], str]:
    """The result's content (for the parent's mailbox) and its text, where `{duration}`
    stands for the child's age in seconds (filled in by the statement that pushes it)."""
    body = text.strip() or "(the subagent wrote no text)"
    cut = len(body) > SUMMARY_CHARS
    shown = neutralize(body[:SUMMARY_CHARS], TAGS)
    attrs = {"id": str(child_id), "alias": alias, "title": title, "status": status}
    if reason:
        attrs["reason"] = reason
    attrs.update({"steps": str(steps), "tokens": str(tokens), "usd": str(usd)})
    head = " ".join(f'{k}="{html.escape(v, quote=True)}"' for k, v in attrs.items())
    lines = [f'<subagent_result {head} duration_s="{{duration}}">', shown]
    if error:
        lines.append(f"[ator] The subagent's turn ended with: {neutralize(error, TAGS)}")
    if cut:
        lines.append(f"[ator] Cut at {SUMMARY_CHARS} of {len(body)} characters: call "
                     f'agent_result(id="{alias}", page=1) for all of it.')
    lines.append("</subagent_result>")
    content = {
        "source": f"subagent {alias}",
        "subagent": {"id": str(child_id), "alias": alias, "title": title, "status": status,
                     "reason": reason, "steps": steps, "tokens": tokens, "usd": str(usd),
                     "chars": len(text), "truncated": cut},
    }
    return content, "\n".join(lines)


def told(c: str) -> str:
    """SQL: the child thread aliased `c` has told its parent (its one result row exists)."""
    return (f"EXISTS (SELECT 1 FROM mailbox r WHERE r.thread_id = {c}.parent_id"
            f" AND r.org_id = {c}.org_id AND r.client_message_id = 'subagent:' || {c}.id::text)")


def live(c: str) -> str:
    """SQL: the child thread aliased `c` is live: neither finished (told) nor cancelled."""
    return f"({c}.cancelled_at IS NULL AND NOT {told(c)})"


#: The subagent extension's per-turn column of the start statement (store/turns.py
#: `start_statement`), over the thread row `t`: its parent, its contract and how many of
#: its subagents have not finished (a parent with some looks for results between steps).
TURN_SQL = f"""jsonb_build_object(
  'parent_id', t.parent_id, 'contract', t.contract,
  'children', (SELECT count(*) FROM threads c
                WHERE c.parent_id = t.id AND c.org_id = t.org_id AND {live("c")}))"""


# The claim and the push, one WITH-item: the parent's mailbox holds at most one result per
# child (unique client id `subagent:<child id>`), so the insert *is* the claim, exactly once
# whoever races. `_turn` (the step's turn update) must have matched: a turn closed elsewhere
# pushes nothing here (the reaper's sweep tells the parent of a lost one). The child's own
# thread row is not updated here: the step's event append already updates it in this
# statement, and PostgreSQL applies only one update per row per statement.
RESULT_SQL = f"""_result AS (
  INSERT INTO mailbox (id, org_id, thread_id, client_message_id, kind, content)
  SELECT :r_id, :org_id, p.id, :r_cmid, 'notification',
         jsonb_set(jsonb_set(CAST(:r_content AS jsonb), '{{subagent,duration_s}}',
                             to_jsonb(round(extract(epoch FROM now() - c.created_at), 3))),
                   '{{text}}', to_jsonb(regexp_replace(:r_text, '\\{{duration\\}}',
                       round(extract(epoch FROM now() - c.created_at), 1)::text)))
    FROM threads c JOIN threads p ON p.id = c.parent_id AND p.org_id = c.org_id
   WHERE c.id = :thread_id AND c.org_id = :org_id
     AND c.cancelled_at IS NULL AND p.cancelled_at IS NULL AND p.deleted_at IS NULL
     AND EXISTS (SELECT 1 FROM _turn)
     -- More work already waits: the turn that takes it ends later and reports then.
     AND NOT EXISTS (SELECT 1 FROM mailbox m WHERE m.thread_id = c.id AND m.org_id = c.org_id
                      AND m.turn_id IS NULL)
     -- Its own children still run: their results come back here first.
     AND NOT EXISTS (SELECT 1 FROM threads g WHERE g.parent_id = c.id AND g.org_id = c.org_id
                      AND {live("g")})
  ON CONFLICT ON CONSTRAINT uq_mailbox_thread_client DO NOTHING
  RETURNING thread_id
)"""


def result_params(child_id: UUID, content: dict[str, Any], text: str) -> dict[str, Any]:
    """Parameters of RESULT_SQL: the item's content (`text` is its text, with `{duration}`
    standing for the child's age in seconds, filled in by the statement)."""
    return {"r_id": uuid.uuid4(), "r_cmid": f"{RESULT_CMID}{child_id}",
            "r_content": jsonenc.dumps(content),
            "r_text": text}


async def tell_idle(
    db: Database, scope: Scope, child_id: UUID, content: dict[str, Any], text: str
) -> UUID | None:
    """Tell the parent of a child that runs no turn now (stopped while it waited for its own
    subagents, which the stop cancelled: no turn of its will end to tell it). The same claim
    as a final write's, so if a turn of the child ends too, the parent is still told once.
    Returns the parent's id when this call told it."""
    stmt = sa.text(f"""
        WITH _turn AS (
          SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM turns WHERE thread_id = :thread_id
                                       AND org_id = :org_id AND status = 'running')
        ), {RESULT_SQL}
        SELECT (SELECT thread_id FROM _result) AS parent
    """)
    params = {"thread_id": child_id, "org_id": scope.org_id,
              **result_params(child_id, content, text)}
    parent: UUID | None = (await db.fetch(stmt, params, write=True))[0]["parent"]
    return parent


_RESULT_PART = PartSql("subagent_result", ctes=(RESULT_SQL,),
                       selects=("(SELECT thread_id FROM _result) AS notified_parent",),
                       params=frozenset({"r_id", "r_cmid", "r_content", "r_text"}))


@dataclass(frozen=True, slots=True)
class ResultPart:
    """A child's final write also pushes its result to the parent (see RESULT_SQL)."""

    child_id: UUID
    content: dict[str, Any]
    text: str
    sql: ClassVar[PartSql] = _RESULT_PART

    def values(self) -> dict[str, Any]:
        return result_params(self.child_id, self.content, self.text)


async def cancel(db: Database, scope: Scope, thread_id: UUID, *, include_self: bool) -> list[UUID]:
    """Mark the subtree below `thread_id` (and the thread itself with `include_self`)
    cancelled, and drop results still pending from it, in one statement. Returns the ids
    marked (those already cancelled are not returned again).

    The results go first (`gone` is counted before a thread is marked): a turn that starts
    takes its mailbox items, then its thread's row, and the other order could deadlock
    with it."""
    stmt = sa.text("""
        WITH RECURSIVE sub AS (
          SELECT id, 0 AS lvl FROM threads WHERE id = :id AND org_id = :org_id
          UNION ALL
          SELECT t.id, sub.lvl + 1 FROM threads t JOIN sub ON t.parent_id = sub.id
           WHERE t.org_id = :org_id
        ), dropped AS (
          DELETE FROM mailbox
           WHERE org_id = :org_id AND turn_id IS NULL
             AND client_message_id IN (SELECT 'subagent:' || id::text FROM sub
                                        WHERE lvl > 0 OR :include_self)
          RETURNING id
        ), gone AS (SELECT count(*) AS n FROM dropped), marked AS (
          UPDATE threads SET cancelled_at = now()
           WHERE id IN (SELECT id FROM sub WHERE lvl > 0 OR :include_self)
             AND org_id = :org_id AND cancelled_at IS NULL
             AND (SELECT n FROM gone) >= 0
          RETURNING id
        )
        SELECT id, (SELECT n FROM gone) AS dropped FROM marked
    """)
    rows = await db.fetch(stmt, {"id": thread_id, "org_id": scope.org_id,
                                 "include_self": include_self}, write=True)
    return [r["id"] for r in rows]


async def tree(db: Database, scope: Scope, thread_id: UUID) -> list[Node]:
    """The thread and every descendant, parents before children, with their figures summed
    over all their turns. Raises NotFound for another org's thread."""
    stmt = sa.text(f"""
        WITH RECURSIVE sub AS (
          SELECT id FROM threads WHERE id = :id AND org_id = :org_id AND deleted_at IS NULL
          UNION ALL
          SELECT t.id FROM threads t JOIN sub ON t.parent_id = sub.id WHERE t.org_id = :org_id
        )
        SELECT t.id, t.parent_id, t.depth, t.title, t.alias, t.cancelled_at, t.created_at,
               {told("t")} AS told,
               COALESCE(sum(u.steps), 0) AS steps,
               COALESCE(sum(u.input_tokens + u.output_tokens + u.cache_read_tokens
                            + u.cache_write_tokens), 0) AS tokens,
               COALESCE(sum(u.cost_usd), 0) AS usd,
               bool_or(u.status = 'running') AS live,
               (array_agg(u.status ORDER BY u.started_at DESC))[1] AS last_status
          FROM sub JOIN threads t ON t.id = sub.id
          LEFT JOIN turns u ON u.thread_id = t.id AND u.org_id = t.org_id
         GROUP BY t.id
         ORDER BY t.depth, t.created_at, t.id
    """)
    rows = await db.fetch(stmt, {"id": thread_id, "org_id": scope.org_id}, write=False)
    if not rows:
        raise NotFound("thread not found")
    nodes = []
    for r in rows:
        live = bool(r["live"])
        if r["cancelled_at"] is not None and not live:
            status = "cancelled"
        else:
            status = "running" if live else (r["last_status"] or "idle")
        nodes.append(Node(r["id"], r["parent_id"], r["depth"], r["title"], r["alias"], status,
                          int(r["steps"]), int(r["tokens"]), Decimal(r["usd"]), live,
                          bool(r["told"]), r["created_at"]))
    return nodes


async def child(db: Database, scope: Scope, parent_id: UUID, ref: str) -> Node:
    """A child of `parent_id` by id or alias, with its figures. Raises NotFound."""
    for node in await tree(db, scope, parent_id):
        if node.parent_id == parent_id and ref in (str(node.id), node.alias):
            return node
    raise NotFound(f"no subagent {ref!r} of this thread")


async def final_text(db: Database, scope: Scope, thread_id: UUID) -> str:
    """The text of the thread's last assistant message that has any."""
    stmt = sa.text("""
        SELECT data FROM events
         WHERE thread_id = :id AND org_id = :org_id AND kind = 'assistant'
         ORDER BY seq DESC LIMIT 20
    """)
    for r in await db.fetch(stmt, {"id": thread_id, "org_id": scope.org_id}, write=False):
        text = "".join(b.get("text", "") for b in r["data"].get("content", [])
                       if isinstance(b, dict) and b.get("type") == "text")
        if text:
            return text
    return ""


async def pending_results(
    db: Database, scope: Scope, thread_id: UUID
) -> list[tuple[UUID, str, dict[str, Any]]]:
    """Subagent results waiting in the thread's mailbox (store.mailbox.pending_notices)."""
    return await mailbox.pending_notices(db, scope, thread_id, RESULT_CMID)


async def spend(db: Database, scope: Scope, thread_id: UUID, root_id: UUID) -> TreeSpend:
    """What the child `thread_id` and the tree of `root_id` used so far (one statement)."""
    stmt = sa.text(f"""
        SELECT t.contract,
               (SELECT COALESCE(sum(steps), 0) FROM turns
                 WHERE thread_id = t.id AND org_id = t.org_id) AS steps,
               (SELECT COALESCE(sum(input_tokens + output_tokens + cache_read_tokens
                                    + cache_write_tokens), 0) FROM turns
                 WHERE thread_id = t.id AND org_id = t.org_id) AS tokens,
               (SELECT COALESCE(sum(cost_usd), 0) FROM turns
                 WHERE thread_id = t.id AND org_id = t.org_id) AS usd,
               tree.tokens AS tree_tokens, tree.usd AS tree_usd
          FROM threads t, ({_TREE_SPEND}) tree
         WHERE t.id = :id AND t.org_id = :org_id
    """)
    rows = await db.fetch(stmt, {"id": thread_id, "org_id": scope.org_id, "root_id": root_id},
                          write=False)
    if not rows:
        raise NotFound("thread not found")
    r = rows[0]
    return TreeSpend(int(r["steps"]), int(r["tokens"]), Decimal(r["usd"]),
                     int(r["tree_tokens"]), Decimal(r["tree_usd"]), dict(r["contract"] or {}))


async def set_org_caps(db: Database, scope: Scope, caps: dict[str, Any]) -> None:
    """Store the org's own tree caps (`orgs.settings.caps`): they lower what any setup of
    the org allows (checked by the caller against the operator's ceilings)."""
    stmt = sa.text("""
        UPDATE orgs SET settings = jsonb_set(settings, '{caps}', CAST(:caps AS jsonb))
         WHERE id = :org_id RETURNING id
    """)
    rows = await db.fetch(stmt, {"org_id": scope.org_id, "caps": jsonenc.dumps(caps)}, write=True)
    if not rows:
        raise NotFound("org not found")
