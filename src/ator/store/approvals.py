"""Pending actions: what a person decides once (layer: store; imports sqlalchemy, ator.store.*,
ator.jsonenc, ator.errors).

A pending action is a held tool call (`kind='tool'`; later a workflow `human` gate, another
kind) with its validated arguments. Where it is written:

- inside a turn, by the statement that persists the step and ends the turn `waiting`
  (`PendingActions`, a step part: one part for all the step's held calls, with their expiry
  jobs) — the `approval.requested` webhook is written by that same statement (webhooks' turn end);
- outside a turn (the MCP gateway), by `create` (one statement, with its expiry job).

Every decision is one conditional `UPDATE … WHERE status = 'pending'`: exactly one decider
wins, whatever the replica; the loser gets no row (`decide` returns None). A denial (or an
expiry) delivers its error result to the thread's mailbox in the same statement; an
approval is claimed first, run, then delivered (`deliver`). The row is the decision's audit:
who decided, when, the arguments before and after, the reason and the result.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

import sqlalchemy as sa

from ator import jsonenc
from ator.store import cursors
from ator.store.database import Database
from ator.store.jobs import CHANNEL
from ator.store.parts import PartSql
from ator.store.scope import Scope

__all__ = ["Action", "PendingActions", "PendingPage", "Row", "action_of", "create", "decide",
           "deliver", "get", "list_pending", "mcp_writes", "set_mcp_writes"]

MAX_PAGE = 200


@dataclass(frozen=True, slots=True)
class Row:
    """One held call of a step: its action id, the call, and what the decider sees."""

    id: UUID
    tool_use_id: str
    name: str
    arguments: dict[str, Any]
    subject: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Action:
    id: UUID
    org_id: UUID
    kind: str
    status: str
    thread_id: UUID | None
    turn_id: UUID | None
    tool_use_id: str | None
    name: str
    arguments: dict[str, Any]
    subject: dict[str, Any]
    decided_arguments: dict[str, Any] | None
    reason: str | None
    decided_by: UUID | None
    decided_at: datetime | None
    expires_at: datetime | None
    result: dict[str, Any] | None
    executed_at: datetime | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class PendingPage:
    actions: list[Action]
    next_cursor: str | None


# Written only while the turn is still running (`_turn` has its row): a turn closed
# elsewhere leaves no pending action. The expiry job runs at `expires_at` (none: never).
_PENDING = PartSql("approvals.pending", ctes=("""_pa AS (
  INSERT INTO pending_actions (id, org_id, kind, thread_id, turn_id, tool_use_id, name,
                               arguments, subject, expires_at)
  SELECT a.id, :org_id, 'tool', :thread_id, :turn_id, a.tool_use_id, a.name, a.arguments,
         a.subject, now() + make_interval(secs => CAST(:expire AS double precision))
    FROM jsonb_to_recordset(CAST(:rows AS jsonb))
         AS a(id uuid, tool_use_id text, name text, arguments jsonb, subject jsonb)
   WHERE EXISTS (SELECT 1 FROM _turn)
  RETURNING id, expires_at
)""", """_pa_job AS (
  INSERT INTO jobs (org_id, kind, payload, max_attempts, run_at)
  SELECT :org_id, :job_kind, jsonb_build_object('action_id', id), :attempts, expires_at
    FROM _pa WHERE expires_at IS NOT NULL
  RETURNING id
)"""), selects=("(SELECT count(*) FROM _pa) AS pending_actions",),
    params=frozenset({"rows", "expire", "job_kind", "attempts"}))


@dataclass(frozen=True, slots=True)
class PendingActions:
    """A step part: the step's held calls as pending actions, and their expiry jobs."""

    rows: tuple[Row, ...]
    expire_after: float | None
    job_kind: str
    attempts: int
    sql: ClassVar[PartSql] = _PENDING

    def values(self) -> dict[str, Any]:
        return {"rows": jsonenc.dumps([
            {"id": str(r.id), "tool_use_id": r.tool_use_id, "name": r.name,
             "arguments": r.arguments, "subject": r.subject} for r in self.rows]),
            "expire": self.expire_after, "job_kind": self.job_kind,
            "attempts": self.attempts}


_CREATE = sa.text(f"""
WITH _pa AS (
  INSERT INTO pending_actions (id, org_id, kind, thread_id, turn_id, tool_use_id, name,
                               arguments, subject, expires_at)
  VALUES (:id, :org_id, :kind, :thread_id, NULL, :tool_use_id, :name,
          CAST(:arguments AS jsonb), CAST(:subject AS jsonb),
          now() + make_interval(secs => CAST(:expire AS double precision)))
  RETURNING *
), _job AS (
  INSERT INTO jobs (org_id, kind, payload, max_attempts, run_at)
  SELECT org_id, :job_kind, jsonb_build_object('action_id', id), :attempts, expires_at
    FROM _pa WHERE expires_at IS NOT NULL
  RETURNING id
)
SELECT _pa.*, (SELECT count(pg_notify('{CHANNEL}', '')) FROM _job) AS jobs FROM _pa
""")


async def create(
    db: Database, scope: Scope, *, kind: str, name: str, arguments: dict[str, Any],
    subject: dict[str, Any], thread_id: UUID | None = None, tool_use_id: str | None = None,
    expire_after: float | None, job_kind: str, attempts: int,
) -> Action:
    """A pending action outside a turn (the MCP gateway's held call, a workflow gate), with
    its expiry job, in one statement."""
    rows = await db.fetch(_CREATE, {
        "id": uuid.uuid4(), "org_id": scope.org_id, "kind": kind, "thread_id": thread_id,
        "tool_use_id": tool_use_id, "name": name, "arguments": jsonenc.dumps(arguments),
        "subject": jsonenc.dumps(subject), "expire": expire_after, "job_kind": job_kind,
        "attempts": attempts}, write=True)
    return action_of(rows[0])


_GET = sa.text("SELECT * FROM pending_actions WHERE id = :id AND org_id = :org_id")


async def get(db: Database, scope: Scope, action_id: UUID) -> Action | None:
    """The org's action, or None (another org's is None too)."""
    rows = await db.fetch(_GET, {"id": action_id, "org_id": scope.org_id}, write=False)
    return action_of(rows[0]) if rows else None


async def list_pending(db: Database, scope: Scope, *, limit: int = 50,
                       cursor: str | None = None, kind: str | None = None) -> PendingPage:
    """The org's pending actions, oldest first (the longest waiting on top), a page at a
    time. Raises ValidationFailed (`invalid_cursor`) for a cursor this did not make."""
    limit = cursors.limit_of(limit, MAX_PAGE)
    after = "" if cursor is None else "AND (created_at, id) > (:c_at, :c_id)"
    params: dict[str, Any] = {"org_id": scope.org_id, "limit": limit + 1}
    if kind is not None:
        after += " AND kind = :kind"
        params["kind"] = kind
    if cursor is not None:
        params["c_at"], params["c_id"] = cursors.decode(cursor)
    stmt = sa.text(f"""SELECT * FROM pending_actions
                        WHERE org_id = :org_id AND status = 'pending' {after}
                        ORDER BY created_at, id LIMIT :limit""")
    rows = await db.fetch(stmt, params, write=False)
    return PendingPage(*cursors.page_of([action_of(r) for r in rows], limit))


# The decision: only a pending action changes (the claim), and only an expired one expires.
# `:content` (a `tool_results` mailbox item, or NULL for an approval, delivered once run)
# reaches the thread's mailbox in the same statement, unique per action.
_DECIDE = sa.text("""
WITH _d AS (
  UPDATE pending_actions
     SET status = :status, decided_by = :by, decided_at = now(), reason = :reason,
         decided_arguments = CAST(:decided AS jsonb),
         result = CAST(:result AS jsonb),
         executed_at = CASE WHEN CAST(:result AS jsonb) IS NULL THEN NULL ELSE now() END
   WHERE id = :id AND org_id = :org_id AND status = 'pending'
     AND (NOT :expiring OR expires_at <= now())
  RETURNING *
), _mb AS (
  INSERT INTO mailbox (id, org_id, thread_id, client_message_id, kind, content, sender)
  SELECT :mb_id, _d.org_id, _d.thread_id, 'decision:' || _d.id::text, 'tool_results',
         CAST(:content AS jsonb), :by
    FROM _d JOIN threads t ON t.id = _d.thread_id AND t.deleted_at IS NULL
   WHERE CAST(:content AS jsonb) IS NOT NULL
  ON CONFLICT ON CONSTRAINT uq_mailbox_thread_client DO NOTHING
  RETURNING id
)
SELECT _d.*, (SELECT count(*) FROM _mb) AS delivered FROM _d
""")


async def decide(
    db: Database, scope: Scope, action_id: UUID, *, status: str, by: UUID | None,
    reason: str | None, decided_arguments: dict[str, Any] | None,
    content: dict[str, Any] | None, expiring: bool = False,
) -> Action | None:
    """Decide a pending action; None when it was not pending (decided already, or not
    expired yet when `expiring`). `content` (a denial's result) reaches the thread's
    mailbox in the same statement."""
    result = None if content is None else content["results"][0]
    rows = await db.fetch(_DECIDE, {
        "id": action_id, "org_id": scope.org_id, "status": status, "by": by,
        "reason": reason, "expiring": expiring, "mb_id": uuid.uuid4(),
        "decided": None if decided_arguments is None else jsonenc.dumps(decided_arguments),
        "result": None if result is None else jsonenc.dumps(result),
        "content": None if content is None else jsonenc.dumps(content)}, write=True)
    return action_of(rows[0]) if rows else None


_DELIVER = sa.text("""
WITH _d AS (
  UPDATE pending_actions SET result = CAST(:result AS jsonb), executed_at = now()
   WHERE id = :id AND org_id = :org_id AND status = 'approved' AND result IS NULL
  RETURNING *
), _mb AS (
  INSERT INTO mailbox (id, org_id, thread_id, client_message_id, kind, content, sender)
  SELECT :mb_id, _d.org_id, _d.thread_id, 'decision:' || _d.id::text, 'tool_results',
         CAST(:content AS jsonb), _d.decided_by
    FROM _d JOIN threads t ON t.id = _d.thread_id AND t.deleted_at IS NULL
  ON CONFLICT ON CONSTRAINT uq_mailbox_thread_client DO NOTHING
  RETURNING id
)
SELECT _d.*, (SELECT count(*) FROM _mb) AS delivered FROM _d
""")


async def deliver(db: Database, scope: Scope, action_id: UUID,
                  content: dict[str, Any]) -> Action | None:
    """Record an approved action's result and put it in its thread's mailbox (one
    statement, once: None when it was delivered already)."""
    rows = await db.fetch(_DELIVER, {
        "id": action_id, "org_id": scope.org_id, "mb_id": uuid.uuid4(),
        "result": jsonenc.dumps(content["results"][0]),
        "content": jsonenc.dumps(content)}, write=True)
    return action_of(rows[0]) if rows else None


def action_of(r: Any) -> Action:
    """An action from its row (store/gates.py reads them in a tick's transaction)."""
    return Action(
        r["id"], r["org_id"], r["kind"], r["status"], r["thread_id"], r["turn_id"],
        r["tool_use_id"], r["name"], r["arguments"], r["subject"], r["decided_arguments"],
        r["reason"], r["decided_by"], r["decided_at"], r["expires_at"], r["result"],
        r["executed_at"], r["created_at"])


_SET_ORG = sa.text("""
UPDATE orgs
   SET settings = settings || jsonb_build_object('approve_mcp_writes', CAST(:value AS boolean))
 WHERE id = :org_id RETURNING id""")


async def set_mcp_writes(db: Database, scope: Scope, value: bool) -> bool:
    """Whether the org requires approval of MCP tools not marked read-only; False: no org."""
    return bool(await db.fetch(_SET_ORG, {"org_id": scope.org_id, "value": value},
                               write=True))


_GET_ORG = sa.text("""
SELECT COALESCE((settings ->> 'approve_mcp_writes')::boolean, false) AS value
  FROM orgs WHERE id = :org_id""")


async def mcp_writes(db: Database, scope: Scope) -> bool:
    rows = await db.fetch(_GET_ORG, {"org_id": scope.org_id}, write=False)
    return bool(rows and rows[0]["value"])
