"""Turn rows and the statements a turn is made of (layer: store; imports sqlalchemy,
ator.store.*, ator.jsonenc).

A turn costs few round trips by design (each is measured in tests and bench/):

1. `start_turn`     one statement: read thread + setup + org budget + the prompt layers in
                    force (org policy, thread instructions, their versions) + prior
                    history (from the latest compaction on), drain *all* pending mailbox
                    items (FOR UPDATE SKIP LOCKED), insert the turn, append `turn_started`
                    and the items as events. `post_turn` is the same statement that also
                    inserts the message being posted (to an idle thread): its mailbox
                    commit and its turn's start are one. `post_turns` is that statement
                    for many threads at once (engine/starts.py batches a burst into it).
2. `write_step`     one write per persistence point: events + turn usage/heartbeat
                    (+ model_calls row + org month usage) (+ finishing the turn).

`write_step` only touches a turn that is still `running`; if the reaper or a stop closed it
meanwhile, nothing is appended and the caller is told (`StepWrite.live` is False).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, ClassVar
from uuid import UUID

import sqlalchemy as sa

from ator import jsonenc
from ator.errors import NotFound
from ator.store import tree
from ator.store.database import Database, first
from ator.store.events import HISTORY_KINDS, append_cte, event_params, to_event
from ator.store.ledger import (
    BUDGET_SHARD,
    LIMIT_SQL,
    SETTLE_TURN_SET,
    SETTLE_USAGE_SET,
    TURN_SHARD,
)
from ator.store.mailbox import Post
from ator.store.parts import PartSql, StepPart, compose
from ator.store.records import Event, MailboxItem, Turn
from ator.store.schema import turns
from ator.store.scope import Scope

__all__ = [
    "Billed",
    "Drained",
    "Finished",
    "LostTurn",
    "ModelCallRow",
    "Released",
    "Snapshot",
    "Started",
    "Starting",
    "StepPart",
    "StepWrite",
    "TurnStart",
    "get_turn",
    "list_turns",
    "post_turn",
    "post_turns",
    "reap_lost_turns",
    "start_statement",
    "start_turn",
    "write_step",
]

_KINDS_SQL = ", ".join(f"'{k}'" for k in HISTORY_KINDS)

_START_TURN = f"""
WITH _in AS (
  -- The threads to start, one row each (a thread at most once: its lease is held).
  {{input}}
), _ctx AS (
  -- Read before anything below writes: every CTE sees the statement's starting snapshot,
  -- so `history` is the thread as it was before this turn's events.
  SELECT bi.ord AS _ord, bi.turn_id AS _turn_id,
         t.id, t.org_id, t.setup_id, t.instructions, t.parent_id, t.root_id, t.depth,
         {{columns}}t.deleted_at, s.name AS setup_name, s.provider, s.model, s.persona, s.config,
         s.tool_policy, s.version AS setup_version, {LIMIT_SQL} AS monthly_budget_usd,
         t.instructions_version, o.policy, o.policy_version, o.policy_replace,
         (SELECT COALESCE(jsonb_agg(jsonb_build_object('seq', e.seq, 'kind', e.kind,
                                                       'data', e.data) ORDER BY e.seq), '[]')
            FROM events e
           WHERE e.thread_id = t.id AND e.kind IN ({_KINDS_SQL})
             -- From the latest compaction on: its summary stands for what it replaced.
             AND e.seq > COALESCE((SELECT (c.data->>'through_seq')::bigint FROM events c
                                    WHERE c.thread_id = t.id AND c.kind = 'compaction'
                                    ORDER BY c.seq DESC LIMIT 1), 0)) AS history
    FROM _in bi
    JOIN threads t ON t.id = bi.thread_id AND t.org_id = bi.org_id
    JOIN setups s ON s.id = t.setup_id
    JOIN orgs o ON o.id = t.org_id
), _drained AS (
  UPDATE mailbox m SET turn_id = c._turn_id
    FROM _ctx c
   WHERE m.id IN (SELECT x.id FROM mailbox x
                   WHERE (x.thread_id, x.org_id) IN (SELECT id, org_id FROM _ctx)
                     AND x.turn_id IS NULL
                   ORDER BY x.created_at, x.id
                   FOR UPDATE SKIP LOCKED)
     AND m.thread_id = c.id
  RETURNING m.thread_id, m.id, m.client_message_id, m.kind, m.content, m.sender,
            m.created_at, m.traceparent
){{posted}}, _taken AS (
  -- What each turn takes: the pending items, then the one posted with it (if any).
  SELECT 0 AS src, * FROM _drained{{posted_union}}
), _live AS (
  SELECT c.* FROM _ctx c WHERE EXISTS (SELECT 1 FROM _taken k WHERE k.thread_id = c.id)
), _turn AS (
  -- The config snapshot is frozen from _ctx by the engine and written with the first step.
  INSERT INTO turns (id, org_id, thread_id, status, config_snapshot, config_hash, owner)
  SELECT _turn_id, org_id, id, 'running', '{{}}'::jsonb, '', :owner FROM _live
  RETURNING id, thread_id
), _stale AS (
  -- We hold the thread's lease, so a turn still marked running here lost its owner.
  UPDATE turns u SET status = 'lost', stop_reason = 'error:lost', ended_at = now(),
                     error = 'owner lost its lease'
   WHERE {{stale}} AND u.status = 'running'
  RETURNING u.id, u.thread_id
), _parts AS (
  SELECT thread_id, 0 AS grp, 0::bigint AS sub, 'turn_ended' AS kind,
         jsonb_build_object('turn_id', id::text, 'status', 'lost',
                            'stop_reason', 'error:lost',
                            'error', 'owner lost its lease') AS data
    FROM _stale
  UNION ALL
  SELECT id, 1, 0, 'turn_started',
         -- Where the thread sits in its tree of threads, for the org room's push (a tree
         -- view re-reads itself when a thread below it starts a turn).
         jsonb_build_object('turn_id', _turn_id::text, 'owner', CAST(:owner AS text),
                            'parent_id', parent_id::text, 'root_id', root_id::text)
    FROM _live
  UNION ALL
  SELECT thread_id, 2, row_number() OVER (PARTITION BY thread_id ORDER BY src, created_at, id),
         kind, content || jsonb_build_object('client_message_id', client_message_id,
                                             'mailbox_id', id::text, 'sender', sender::text)
    FROM _taken
), _items AS (
  SELECT thread_id, row_number() OVER (PARTITION BY thread_id ORDER BY grp, sub) AS ord, kind,
         data
    FROM _parts
), _seq AS (
  UPDATE threads t SET last_seq = t.last_seq + n.n
    FROM (SELECT thread_id, count(*) AS n FROM _items GROUP BY thread_id) n
   WHERE t.id = n.thread_id AND t.id IN (SELECT thread_id FROM _turn)
  RETURNING t.id, t.last_seq - n.n AS base
), _ev AS (
  INSERT INTO events (org_id, thread_id, turn_id, seq, kind, data)
  SELECT c.org_id, c.id, c._turn_id, s.base + i.ord, i.kind, i.data
    FROM _seq s JOIN _live c ON c.id = s.id JOIN _items i ON i.thread_id = s.id
  RETURNING thread_id, seq, kind, data, created_at
)
SELECT _ctx.*,
       (SELECT COALESCE(jsonb_agg(jsonb_build_object('seq', seq, 'kind', kind, 'data', data,
                                                     'created_at', created_at) ORDER BY seq),
                        '[]')
          FROM _ev WHERE _ev.thread_id = _ctx.id) AS events{{items}}
  FROM _ctx
"""
# An item posted to an idle thread is inserted already taken by the turn this statement
# starts (a CTE cannot see a row a sibling CTE inserts, so it is not drained: it is born
# drained). Its client id is unique per thread as in `mailbox.submit`: a resend inserts
# nothing, and then only what was pending starts a turn. One post per thread, in the order of
# `_in` (`p.ord` is the entry's).
_POSTED = """, _posted AS (
  INSERT INTO mailbox (id, org_id, thread_id, client_message_id, kind, content, sender,
                       traceparent, turn_id)
  SELECT p.id, t.org_id, t.id, p.cmid, p.kind, CAST(p.content AS jsonb), p.sender,
         p.traceparent, bi.turn_id
    FROM {posts}
    JOIN _in bi ON bi.ord = p.ord
    JOIN threads t ON t.id = bi.thread_id AND t.org_id = bi.org_id
   WHERE t.deleted_at IS NULL
  ON CONFLICT ON CONSTRAINT uq_mailbox_thread_client DO NOTHING
  RETURNING thread_id, id, client_message_id, kind, content, sender, created_at, traceparent
)"""
# The entries as parameters: one entry's as scalars (PostgreSQL then plans for one row and
# keeps that plan; with an array it planned every call for a length it cannot know, a third of
# a sequential turn's time), many entries' as arrays, in order (`ord`).
_INPUT_ONE = ("SELECT CAST(:turn_id AS uuid) AS turn_id, CAST(:thread_id AS uuid) AS thread_id,"
              " CAST(:org_id AS uuid) AS org_id, 1::bigint AS ord")
_INPUT_MANY = """SELECT * FROM unnest(CAST(:turn_ids AS uuid[]), CAST(:thread_ids AS uuid[]),
                       CAST(:org_ids AS uuid[]))
         WITH ORDINALITY AS bi(turn_id, thread_id, org_id, ord)"""
# A running turn of a thread being started, by the thread. One entry's names it by the
# parameter, which PostgreSQL looks up in the thread index; by _live, it scanned every running
# turn of every thread (0.2 ms a start with 200 running), a cost a batch pays once.
_STALE_ONE = ("u.thread_id = CAST(:thread_id AS uuid) AND u.org_id = CAST(:org_id AS uuid)"
              " AND EXISTS (SELECT 1 FROM _live)")
_STALE_MANY = "(u.thread_id, u.org_id) IN (SELECT id, org_id FROM _live)"
_POST_FIELDS = (("id", "uuid"), ("cmid", "text"), ("kind", "text"), ("content", "text"),
                ("sender", "uuid"), ("traceparent", "text"))
_POSTS_ONE = "(SELECT " + ", ".join(f"CAST(:p_{n} AS {t}) AS {n}" for n, t in _POST_FIELDS) \
    + ", 1::bigint AS ord) AS p"
_POSTS_MANY = ("unnest(" + ", ".join(f"CAST(:p_{n}s AS {t}[])" for n, t in _POST_FIELDS)
               + ") WITH ORDINALITY AS p("
               + ", ".join(n for n, _t in _POST_FIELDS) + ", ord)")
_POSTED_UNION = """
  UNION ALL SELECT 1, * FROM _posted"""
_POSTED_SELECT = (",\n       (SELECT id FROM _posted p WHERE p.thread_id = _ctx.id) AS posted_id,"
                  " (SELECT created_at FROM _posted p WHERE p.thread_id = _ctx.id) AS posted_at")

Columns = Sequence[tuple[str, str]]
_START_STATEMENTS: dict[tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...], bool,
                              bool], sa.TextClause] = {}


def start_statement(columns: Columns = (), item_columns: Columns = (), *,
                    posting: bool = False, many: bool = False) -> sa.TextClause:
    """The start statement with extensions' columns read as `x_<name>`: `columns` (name,
    select expression over `t` the thread, `s` its setup, `o` its org), and `item_columns`
    (name, aggregate expression over `d`, the mailbox items the turn takes: id,
    client_message_id, kind, content, sender, created_at, traceparent, and `src` — 0 for
    pending items, 1 for the one posted with the turn — in the order `src, created_at, id`).
    `posting`: the variant that also inserts a posted item (`post_turn`). Built once per
    shape (the engine's columns are fixed when it is assembled). `many`: the variant that
    starts any number of threads' turns at once (`post_turns`), its parameters arrays; one
    row per thread found, `_ord` its entry."""
    key = (tuple(columns), tuple(item_columns), posting, many)
    found = _START_STATEMENTS.get(key)
    if found is None:
        extra = "".join(f"({sql}) AS x_{name},\n         " for name, sql in key[0])
        items = "".join(f",\n       (SELECT {sql} FROM _taken d WHERE d.thread_id = _ctx.id)"
                        f" AS x_{name}" for name, sql in key[1])
        if posting:
            items += _POSTED_SELECT
        posted = _POSTED.replace("{posts}", _POSTS_MANY if many else _POSTS_ONE)
        found = sa.text(_START_TURN.replace("{columns}", extra)
                        .replace("{input}", _INPUT_MANY if many else _INPUT_ONE)
                        .replace("{stale}", _STALE_MANY if many else _STALE_ONE)
                        .replace("{posted}", posted if posting else "")
                        .replace("{posted_union}", _POSTED_UNION if posting else "")
                        .replace("{items}", items))
        _START_STATEMENTS[key] = found
    return found


@dataclass(frozen=True, slots=True)
class TurnStart:
    """Everything a turn needs to start, read in one statement."""

    thread_id: UUID
    org_id: UUID
    setup_id: UUID
    setup_name: str
    setup_version: int
    provider: str
    model: str
    persona: str
    config: dict[str, Any]
    tool_policy: dict[str, Any]
    instructions: str
    root_id: UUID | None
    depth: int
    deleted: bool
    monthly_budget_usd: Decimal | None  # the limit in force: min(org budget, ceiling)
    history: list[dict[str, Any]]
    # The editable prompt layers in force (store/layer_versions.py), read in the same statement.
    instructions_version: int = 0
    policy: str = ""
    policy_version: int = 0
    policy_replace: bool = False
    # Extensions' columns (`start_statement`), by name, as read.
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Starting:
    """One thread's turn to start (`post_turns`): its scope, thread, new turn id and, for a
    message posted to the idle thread, the post its start inserts."""

    scope: Scope
    thread_id: UUID
    turn_id: UUID
    post: Post | None = None


Started = tuple[TurnStart, list[Event], MailboxItem | None]


async def start_turn(
    db: Database, scope: Scope, thread_id: UUID, turn_id: UUID, *, owner: str,
    columns: Columns = (), item_columns: Columns = (),
) -> tuple[TurnStart, list[Event]]:
    """Read the turn's context and drain every pending mailbox item into a new turn, in one
    statement. Returns the context and the events appended (`turn_started` first, after a
    `turn_ended` for any turn of this thread still marked running, whose owner must have died
    since we hold the lease); no events means nothing was pending and no turn was created.

    Raises NotFound when the thread is not this org's."""
    start, events, _ = _one(await _start(db, [Starting(scope, thread_id, turn_id)],
                                         owner=owner, columns=columns,
                                         item_columns=item_columns, posting=False))
    return start, events


async def post_turn(
    db: Database, scope: Scope, thread_id: UUID, turn_id: UUID, post: Post, *, owner: str,
    columns: Columns = (), item_columns: Columns = (),
) -> Started:
    """`start_turn` that also inserts `post` into the mailbox, taken by the turn it starts:
    one statement for a message to an idle thread (the caller holds its lease). The third
    value is the inserted item, None when nothing was inserted (the client id was used
    before, or the thread is in the trash): then only what was pending, if anything, starts
    a turn, and the caller answers the post the way `mailbox.submit` does.

    Raises NotFound when the thread is not this org's."""
    return _one(await post_turns(db, [Starting(scope, thread_id, turn_id, post)], owner=owner,
                                 columns=columns, item_columns=item_columns))


async def post_turns(
    db: Database, starting: Sequence[Starting], *, owner: str,
    columns: Columns = (), item_columns: Columns = (),
) -> list[Started | NotFound]:
    """`post_turn` for many threads (each with its post; the caller holds every lease) in
    one statement and one commit: per entry, in order, what `post_turn` returns, or the
    NotFound it would raise. The statement is all or nothing: an error (a value the database
    refuses in one post) fails every entry, and nothing of any entry was written."""
    return await _start(db, starting, owner=owner, columns=columns,
                        item_columns=item_columns, posting=True)


def _one(results: list[Started | NotFound]) -> Started:
    if isinstance(results[0], NotFound):
        raise results[0]
    return results[0]


async def _start(
    db: Database, starting: Sequence[Starting], *, owner: str,
    columns: Columns, item_columns: Columns, posting: bool,
) -> list[Started | NotFound]:
    many = len(starting) > 1
    suffix = "s" if many else ""
    params: dict[str, Any] = {"owner": owner}
    for name, values in (("turn_id", [s.turn_id for s in starting]),
                         ("thread_id", [s.thread_id for s in starting]),
                         ("org_id", [s.scope.org_id for s in starting])):
        params[name + suffix] = values if many else values[0]
    if posting:
        posts = [s.post.params(s.scope, s.thread_id) for s in starting if s.post is not None]
        if len(posts) != len(starting):
            raise ValueError("every entry of post_turns needs its post")
        for name, _type in _POST_FIELDS:
            values = [p[name] for p in posts]
            params[f"p_{name}{suffix}"] = values if many else values[0]
    statement = start_statement(columns, item_columns, posting=posting, many=many)
    rows = {r["_ord"]: r for r in await db.fetch(statement, params, write=True)}
    return [_started(rows[i], s, columns, item_columns) if i in rows
            else NotFound("thread not found") for i, s in enumerate(starting, 1)]


def _started(r: Any, s: Starting, columns: Columns, item_columns: Columns) -> Started:
    ctx = TurnStart(
        r["id"], r["org_id"], r["setup_id"], r["setup_name"], r["setup_version"],
        r["provider"], r["model"], r["persona"], r["config"], r["tool_policy"],
        r["instructions"], r["root_id"], r["depth"],
        r["deleted_at"] is not None, r["monthly_budget_usd"],
        r["history"], r["instructions_version"], r["policy"], r["policy_version"],
        r["policy_replace"], {name: r[f"x_{name}"] for name, _sql in (*columns, *item_columns)},
    )
    events = [
        Event(e["seq"], e["kind"], e["data"], s.turn_id, _ts(e["created_at"]), s.thread_id)
        for e in r["events"]
    ]
    posted = None
    if s.post is not None and r["posted_id"] is not None:
        posted = MailboxItem(r["posted_id"], s.thread_id, s.post.client_message_id,
                             s.post.kind, s.post.content, s.post.sender, s.turn_id,
                             r["posted_at"])
    return ctx, events, posted


def _ts(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


@dataclass(frozen=True, slots=True)
class ModelCallRow:
    step: int
    provider: str
    model: str
    stop_reason: str | None
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    usage_reported: bool
    cost_usd: Decimal
    priced: bool
    duration_ms: int
    request_meta: dict[str, Any]
    setup_id: UUID | None = None
    purpose: str = "step"  # step, interrupted, compaction, …
    usage_estimated: bool = False
    cost_source: str = "catalog"  # catalog, provider (it reported the cost), unpriced


@dataclass(frozen=True, slots=True)
class StepWrite:
    live: bool  # False: the turn was no longer running; nothing was appended
    events: list[Event]
    # What the parts' `selects` returned, by column name (a claim's outcome, …).
    extra: dict[str, Any] = field(default_factory=dict)


def _usage_cte(shard: str, settle: str) -> str:
    """The org's month usage upsert of a billed call: into `shard` (SQL), with `settle`
    appended to its ON CONFLICT SET list (a reservation's release, or nothing)."""
    return f"""_usage AS (
  -- Billed even when the turn was closed meanwhile: the provider charged for the call.
  INSERT INTO org_usage (org_id, month, shard, cost_usd, tokens)
  VALUES (:org_id, date_trunc('month', now())::date, {shard}, :d_cost,
          :d_in + :d_out + :d_cr + :d_cw)
  ON CONFLICT (org_id, month, shard) DO UPDATE
    SET cost_usd = org_usage.cost_usd + EXCLUDED.cost_usd,
        tokens = org_usage.tokens + EXCLUDED.tokens{settle}
)"""


# The calls come as one JSON array, in the order they were made: `WITH ORDINALITY` keeps
# that order in their ids (how a turn's calls are read back).
_MODEL_CALL = """_mc AS (
  INSERT INTO model_calls (org_id, thread_id, turn_id, setup_id, step, purpose, provider, model,
    stop_reason, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
    usage_reported, usage_estimated, cost_usd, priced, duration_ms, request_meta, cost_source)
  SELECT :org_id, :thread_id, :turn_id, c.setup_id, c.step, c.purpose, c.provider, c.model,
    c.stop_reason, c.input_tokens, c.output_tokens, c.cache_read_tokens, c.cache_write_tokens,
    c.usage_reported, c.usage_estimated, c.cost_usd, c.priced, c.duration_ms, c.request_meta,
    c.cost_source
    FROM ROWS FROM (jsonb_to_recordset(CAST(:mc_rows AS jsonb)) AS (
      setup_id uuid, step integer, purpose text, provider text, model text, stop_reason text,
      input_tokens bigint, output_tokens bigint, cache_read_tokens bigint,
      cache_write_tokens bigint, usage_reported boolean, usage_estimated boolean,
      cost_usd numeric, priced boolean, duration_ms integer, request_meta jsonb,
      cost_source text)) WITH ORDINALITY AS c
   ORDER BY c.ordinality
)"""
_BILLED_SET = (", input_tokens = input_tokens + :d_in, output_tokens = output_tokens + :d_out,"
               " cache_read_tokens = cache_read_tokens + :d_cr,"
               " cache_write_tokens = cache_write_tokens + :d_cw, cost_usd = cost_usd + :d_cost")
_BILLED_PARAMS = frozenset({"d_in", "d_out", "d_cr", "d_cw", "d_cost", "mc_rows"})
# A call that settles a reservation bills the budget row (shard 0), where the next
# reservation reads it under the row's lock; any other call bills its turn's shard.
_BILLED = PartSql("billed", turn_set=_BILLED_SET,
                  ctes=(_MODEL_CALL, _usage_cte(TURN_SHARD, settle="")),
                  params=_BILLED_PARAMS)
_BILLED_SETTLING = PartSql("billed+released", turn_set=_BILLED_SET + SETTLE_TURN_SET,
                           ctes=(_MODEL_CALL, _usage_cte(BUDGET_SHARD, SETTLE_USAGE_SET)),
                           params=_BILLED_PARAMS | {"released"})


@dataclass(frozen=True, slots=True)
class Billed:
    """Model calls, in the order they were made: their rows, their usage added to the turn
    and to the org's month, and the budget reservation they settle (`released`,
    store/ledger.py; 0 without a budget). A write usually bills one call; it bills more
    when the writer held a step through the next call (engine/steps.py)."""

    calls: tuple[ModelCallRow, ...]
    released: Decimal = Decimal(0)

    @property
    def sql(self) -> PartSql:
        return _BILLED_SETTLING if self.released else _BILLED

    def values(self) -> dict[str, Any]:
        calls = self.calls
        out: dict[str, Any] = {
            "d_in": sum(c.input_tokens for c in calls),
            "d_out": sum(c.output_tokens for c in calls),
            "d_cr": sum(c.cache_read_tokens for c in calls),
            "d_cw": sum(c.cache_write_tokens for c in calls),
            "d_cost": sum((c.cost_usd for c in calls), Decimal(0)),
            "mc_rows": jsonenc.dumps([{
                "setup_id": c.setup_id, "step": c.step, "purpose": c.purpose,
                "provider": c.provider, "model": c.model, "stop_reason": c.stop_reason,
                "input_tokens": c.input_tokens, "output_tokens": c.output_tokens,
                "cache_read_tokens": c.cache_read_tokens,
                "cache_write_tokens": c.cache_write_tokens,
                "usage_reported": c.usage_reported, "usage_estimated": c.usage_estimated,
                "cost_usd": str(c.cost_usd), "priced": c.priced,
                "duration_ms": c.duration_ms, "request_meta": c.request_meta,
                "cost_source": c.cost_source,
            } for c in calls]),
        }
        if self.released:
            out["released"] = self.released
        return out


_RELEASED = PartSql("released", turn_set=SETTLE_TURN_SET, ctes=("""_release AS (
  UPDATE org_usage SET reserved_usd = GREATEST(reserved_usd - CAST(:released AS numeric), 0)
   WHERE org_id = :org_id AND month = date_trunc('month', now())::date AND shard = 0
     AND EXISTS (SELECT 1 FROM _turn)
)""",), params=frozenset({"released"}))


@dataclass(frozen=True, slots=True)
class Released:
    """Give back a budget reservation without billing (the call never ran: the turn ended
    before it, or it failed before the provider reported anything)."""

    amount: Decimal
    sql: ClassVar[PartSql] = _RELEASED

    def values(self) -> dict[str, Any]:
        return {"released": self.amount}


_FINISHED = PartSql(
    "finished",
    turn_set=", status = :status, stop_reason = :stop_reason, error = :error, ended_at = now()",
    params=frozenset({"status", "stop_reason", "error"}))


@dataclass(frozen=True, slots=True)
class Finished:
    """The turn's end: status, stop reason and error."""

    status: str
    stop_reason: str
    error: str | None = None
    sql: ClassVar[PartSql] = _FINISHED

    def values(self) -> dict[str, Any]:
        return {"status": self.status, "stop_reason": self.stop_reason, "error": self.error}


_SNAPSHOT = PartSql(
    "snapshot", turn_set=", config_snapshot = CAST(:snapshot AS jsonb), config_hash = :hash",
    params=frozenset({"snapshot", "hash"}))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The turn's frozen, redacted config and its hash (with the turn's first write)."""

    data: dict[str, Any]
    hash: str
    sql: ClassVar[PartSql] = _SNAPSHOT

    def values(self) -> dict[str, Any]:
        return {"snapshot": jsonenc.dumps(self.data), "hash": self.hash}


_DRAINED = PartSql("drained", ctes=("""_drain AS (
  UPDATE mailbox SET turn_id = :turn_id
   WHERE id = ANY(CAST(:ids AS uuid[])) AND thread_id = :thread_id AND org_id = :org_id
     AND turn_id IS NULL AND EXISTS (SELECT 1 FROM _turn)
  RETURNING id
)""",), selects=("(SELECT count(*) FROM _drain) AS drained",), params=frozenset({"ids"}))


@dataclass(frozen=True, slots=True)
class Drained:
    """Mailbox items shown to the model between steps, taken into this turn by the same
    statement that persists them as events (persist, then inject; never twice: the turn's
    thread lease is held, and `turn_id IS NULL` is the claim)."""

    ids: tuple[UUID, ...]
    sql: ClassVar[PartSql] = _DRAINED

    def values(self) -> dict[str, Any]:
        return {"ids": list(self.ids)}


def _step_sql(turn_set: str, ctes: list[str], selects: list[str]) -> str:
    seq_cte, insert = append_cte(guard="_turn")
    turn_cte = ("_turn AS (UPDATE turns SET steps = :steps, heartbeat_at = now()" + turn_set
                + " WHERE id = :turn_id AND org_id = :org_id AND status = 'running' RETURNING id)")
    # Data-modifying CTEs run whether the final SELECT reads them or not.
    return ("WITH " + ",\n".join([turn_cte, *ctes, seq_cte, f"_ev AS ({insert})"])
            + "\nSELECT (SELECT count(*) FROM _turn) AS live, "
            + "".join(f"{c}, " for c in selects)
            + "(SELECT COALESCE(jsonb_agg(jsonb_build_object('seq', seq, 'kind', kind, 'data',"
            " data, 'created_at', created_at) ORDER BY seq), '[]') FROM _ev) AS events")


async def write_step(
    db: Database,
    scope: Scope,
    thread_id: UUID,
    turn_id: UUID,
    items: Sequence[tuple[str, dict[str, Any]]],
    *,
    steps: int,
    parts: Sequence[StepPart] = (),
) -> StepWrite:
    """Persist one step of a running turn in one statement: its events, its step count and
    heartbeat, and every part given (a billed model call, the turn's end, its snapshot, …).
    Nothing is written when the turn is no longer running (`StepWrite.live` is False)."""
    composed = compose(tuple(p.sql for p in parts), _step_sql)
    params: dict[str, Any] = {
        "org_id": scope.org_id, "thread_id": thread_id, "turn_id": turn_id, "steps": steps,
    }
    params.update(event_params(items))
    row = (await db.fetch(composed.statement, composed.params(parts, params), write=True))[0]
    written = [
        Event(e["seq"], e["kind"], e["data"], turn_id, _ts(e["created_at"]), thread_id)
        for e in row["events"]
    ]
    extra = {k: v for k, v in dict(row).items() if k not in ("live", "events")}
    return StepWrite(bool(row["live"]), written, extra)


@dataclass(frozen=True, slots=True)
class LostTurn:
    org_id: UUID
    thread_id: UUID
    turn_id: UUID
    owner: str
    ended: Event  # the committed `turn_ended` event
    told_parent: UUID | None = None  # a subagent's parent, told `errored: lost` (to wake)


_LOST = "owner stopped heartbeating"
_TOLD_LOST = "the server running it stopped before it finished"


async def reap_lost_turns(
    db: Database, ttl: float, *, running: Sequence[UUID] = ()
) -> list[LostTurn]:
    """Close turns whose owner stopped heartbeating more than `ttl` seconds ago (all orgs:
    this is the reaper's system-level sweep) and append their `turn_ended` events. The
    turns the sweeping process is running right now (`running`) are never closed here: they
    are not lost, only late; its actor decides their end. Any other turn of the sweeper's own
    is closed like anyone's: a turn whose task ended without closing its row (its last write
    failed while the database or the coordinator was away) has no one left to close it.

    A lost subagent's parent is told (`errored`, reason `lost`) by the statement that
    appends its `turn_ended`, with the same claim as a final write's (store/tree.py): the
    caller wakes `told_parent`, and if it dies first the mailbox sweep does."""
    stmt = sa.text(f"""
        UPDATE turns SET status = 'lost', stop_reason = 'error:lost',
               error = '{_LOST}', ended_at = now()
         WHERE status = 'running' AND heartbeat_at < now() - make_interval(secs => :ttl)
           AND id <> ALL(CAST(:running AS uuid[]))
        RETURNING org_id, thread_id, id, owner, steps, cost_usd,
                  input_tokens + output_tokens + cache_read_tokens + cache_write_tokens
                    AS tokens,
                  (SELECT t.parent_id FROM threads t WHERE t.id = turns.thread_id) AS parent_id,
                  (SELECT t.alias FROM threads t WHERE t.id = turns.thread_id) AS alias,
                  (SELECT t.title FROM threads t WHERE t.id = turns.thread_id) AS title
    """)
    seq_cte, insert = append_cte()
    append = sa.text(f"WITH {seq_cte} {insert}")
    append_and_tell = sa.text(
        f"WITH _turn AS (SELECT 1), {tree.RESULT_SQL}, {seq_cte}, _ev AS ({insert})"
        " SELECT _ev.*, (SELECT thread_id FROM _result) AS told FROM _ev")
    lost: list[LostTurn] = []
    async with db.begin() as conn:
        for row in (await conn.execute(stmt, {"ttl": ttl, "running": list(running)})).all():
            params = {"org_id": row.org_id, "thread_id": row.thread_id, "turn_id": row.id}
            params.update(event_params([("turn_ended", {
                "turn_id": str(row.id), "status": "lost", "stop_reason": "error:lost",
                "error": _LOST})]))
            statement = append
            if row.parent_id is not None:
                status, reason = tree.status_of_turn("lost", "error:lost")
                content, text = tree.render(
                    child_id=row.thread_id, alias=row.alias or "", title=row.title or "",
                    status=status, reason=reason, steps=row.steps, tokens=int(row.tokens),
                    usd=row.cost_usd, text="", error=_TOLD_LOST)
                params.update(tree.result_params(row.thread_id, content, text))
                statement = append_and_tell
            appended = (await conn.execute(statement, params)).first()
            if appended is None:
                continue  # its thread is gone: the turn is closed, there is no log to tell
            ended = to_event(appended, row.thread_id)
            told = getattr(appended, "told", None)
            lost.append(LostTurn(row.org_id, row.thread_id, row.id, row.owner, ended, told))
    return lost


def _turn(row: Any) -> Turn:
    return Turn(
        row.id,
        row.org_id,
        row.thread_id,
        row.status,
        row.stop_reason,
        row.error,
        row.config_snapshot,
        row.config_hash,
        row.owner,
        row.steps,
        row.input_tokens,
        row.output_tokens,
        row.cache_read_tokens,
        row.cache_write_tokens,
        row.cost_usd,
        row.started_at,
        row.ended_at,
        row.heartbeat_at,
    )


async def get_turn(db: Database, scope: Scope, turn_id: UUID) -> Turn:
    stmt = sa.select(turns).where(turns.c.id == turn_id, turns.c.org_id == scope.org_id)
    row = first(await db.read(stmt))
    if row is None:
        raise NotFound("turn not found")
    return _turn(row)


async def list_turns(db: Database, scope: Scope, thread_id: UUID, *, limit: int = 50) -> list[Turn]:
    stmt = (
        sa.select(turns)
        .where(turns.c.thread_id == thread_id, turns.c.org_id == scope.org_id)
        .order_by(turns.c.started_at.desc(), turns.c.id.desc())
        .limit(limit)
    )
    return [_turn(r) for r in await db.read(stmt)]


_HEARTBEAT_MANY = sa.text("""
    UPDATE turns SET heartbeat_at = now()
    WHERE id = ANY(:ids) AND status = 'running'
    RETURNING id
""")


async def heartbeat_many(db: Database, turn_ids: list[UUID]) -> set[UUID]:
    """Mark many turns alive in one statement (a process's heartbeat); returns the ids still
    running (the others were reaped or finished)."""
    if not turn_ids:
        return set()
    rows = await db.fetch(_HEARTBEAT_MANY, {"ids": turn_ids}, write=True)
    return {r["id"] for r in rows}
