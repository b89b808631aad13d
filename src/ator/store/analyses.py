"""Analyses' rows and statements (layer: store; imports sqlalchemy, ator.jsonenc,
ator.store.*).

`analysis_kinds` holds an org's kinds as data (a spec, its version bumped on each change);
`analyses` every stored result; `analysis_daily` the figures per (org, kind, day) that the
registry reads (runs, model calls, cache hits, rule fallbacks, cost), written by the same
statement as what they count; `eval_runs` scored eval runs. A day's figures are spread
over 16 rows (`shard`) so that concurrent runs of one kind do not all wait on one row.

A cache hit is one statement (`cached_hit`: find the newest cacheable analysis with the
target, kind and input hash, and count the hit); a stored analysis is one (`save`: the row
and its day's figures), on the caller's transaction so the job's completion and the chained
jobs commit with it.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, ClassVar
from uuid import UUID

import sqlalchemy as sa

from ator import jsonenc
from ator.store.database import Connection, Database
from ator.store.jobs import CHANNEL
from ator.store.parts import PartSql
from ator.store.scope import Scope

__all__ = [
    "Analysis",
    "KindRow",
    "NewAnalysis",
    "TurnEndedRuns",
    "cached_hit",
    "delete_kind",
    "eval_runs",
    "existing_ids",
    "get",
    "get_kind",
    "list_analyses",
    "list_kinds",
    "org_active",
    "put_kind",
    "save",
    "save_eval",
    "stats",
    "thread_messages",
]


@dataclass(frozen=True, slots=True)
class Analysis:
    id: UUID
    org_id: UUID
    kind: str
    kind_version: int
    target: str
    input_hash: str
    cacheable: bool
    model: str
    output: dict[str, Any]
    verdict: str
    problems: list[str]
    cost_usd: Decimal
    spent_usd: Decimal
    origin: str
    request_id: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class NewAnalysis:
    kind: str
    kind_version: int
    target: str
    input_hash: str
    cacheable: bool
    model: str
    output: dict[str, Any]
    verdict: str
    problems: list[str]
    cost_usd: Decimal
    spent_usd: Decimal  # what the model call cost, even when its output was rejected
    origin: str
    request_id: str | None
    called: bool  # a model call was made (counted in the day's figures)
    fallback: bool  # the result is the kind's rule


@dataclass(frozen=True, slots=True)
class KindRow:
    id: UUID
    name: str
    version: int
    spec: dict[str, Any]
    created_at: datetime
    updated_at: datetime


def _analysis(r: Any) -> Analysis:
    return Analysis(r["id"], r["org_id"], r["kind"], r["kind_version"], r["target"],
                    r["input_hash"], r["cacheable"], r["model"], _json(r["output"]),
                    r["verdict"], _json(r["problems"]), Decimal(r["cost_usd"]),
                    Decimal(r["spent_usd"]), r["origin"], r["request_id"], r["created_at"])


def _json(value: Any) -> Any:
    return jsonenc.loads(value) if isinstance(value, str | bytes) else value


_COLUMNS = ("id, org_id, kind, kind_version, target, input_hash, cacheable, model, output, "
            "verdict, problems, cost_usd, spent_usd, origin, request_id, created_at")

_DAY = "(now() AT TIME ZONE 'UTC')::date"
_SHARDS = 16


def _shard() -> int:
    """Which of a day's 16 rows a run adds to (any: the figures are sums)."""
    return random.randrange(_SHARDS)

_HIT = sa.text(f"""
WITH hit AS (
  SELECT {_COLUMNS} FROM analyses
   WHERE org_id = :org_id AND kind = :kind AND target = :target AND input_hash = :hash
     AND cacheable
   ORDER BY created_at DESC LIMIT 1
), _day AS (
  INSERT INTO analysis_daily (org_id, kind, day, shard, runs, cache_hits)
  SELECT :org_id, :kind, {_DAY}, :shard, 1, 1 FROM hit
  ON CONFLICT (org_id, kind, day, shard) DO UPDATE
    SET runs = analysis_daily.runs + 1, cache_hits = analysis_daily.cache_hits + 1
)
SELECT * FROM hit""")


async def cached_hit(db: Database, scope: Scope, kind: str, target: str,
                     input_hash: str) -> Analysis | None:
    """The stored analysis this input hashes to (counted as a cache hit), or None."""
    rows = await db.fetch(_HIT, {"org_id": scope.org_id, "kind": kind, "target": target,
                                 "hash": input_hash, "shard": _shard()}, write=True)
    return _analysis(rows[0]) if rows else None


_SAVE = sa.text(f"""
WITH row AS (
  INSERT INTO analyses (id, org_id, kind, kind_version, target, input_hash, cacheable, model,
                        output, verdict, problems, cost_usd, spent_usd, origin, request_id)
  VALUES (:id, :org_id, :kind, :kind_version, :target, :hash, :cacheable, :model,
          CAST(:output AS jsonb), :verdict, CAST(:problems AS jsonb), :cost, :spent, :origin,
          :request_id)
  RETURNING {_COLUMNS}
), _day AS (
  INSERT INTO analysis_daily (org_id, kind, day, shard, runs, model_calls, fallbacks,
                              cost_usd)
  VALUES (:org_id, :kind, {_DAY}, :shard, 1, :calls, :fallbacks, :spent)
  ON CONFLICT (org_id, kind, day, shard) DO UPDATE
    SET runs = analysis_daily.runs + 1,
        model_calls = analysis_daily.model_calls + EXCLUDED.model_calls,
        fallbacks = analysis_daily.fallbacks + EXCLUDED.fallbacks,
        cost_usd = analysis_daily.cost_usd + EXCLUDED.cost_usd
)
SELECT * FROM row""")


async def save(conn: Connection | Database, scope: Scope, new: NewAnalysis) -> Analysis:
    """Store an analysis and count it in its day's figures (one statement)."""
    params = {"id": uuid.uuid4(), "org_id": scope.org_id, "kind": new.kind,
              "kind_version": new.kind_version, "target": new.target, "hash": new.input_hash,
              "cacheable": new.cacheable, "model": new.model,
              "output": jsonenc.dumps(new.output), "verdict": new.verdict,
              "problems": jsonenc.dumps(new.problems), "cost": new.cost_usd,
              "spent": new.spent_usd, "origin": new.origin, "request_id": new.request_id,
              "calls": int(new.called), "fallbacks": int(new.fallback), "shard": _shard()}
    if isinstance(conn, Database):
        return _analysis((await conn.fetch(_SAVE, params, write=True))[0])
    return _analysis((await conn.execute(_SAVE, params)).one())


async def get(db: Database, scope: Scope, analysis_id: UUID) -> Analysis | None:
    rows = await db.fetch(sa.text(f"SELECT {_COLUMNS} FROM analyses "
                                  "WHERE id = :id AND org_id = :org_id"),
                          {"id": analysis_id, "org_id": scope.org_id}, write=False)
    return _analysis(rows[0]) if rows else None


_LIST = sa.text(f"""
SELECT {_COLUMNS} FROM analyses
 WHERE org_id = :org_id AND (CAST(:kind AS text) IS NULL OR kind = :kind)
   AND (CAST(:target AS text) IS NULL OR target = :target)
 ORDER BY created_at DESC, id LIMIT :limit""")


async def list_analyses(db: Database, scope: Scope, *, kind: str | None = None,
                        target: str | None = None, limit: int = 50) -> list[Analysis]:
    rows = await db.fetch(_LIST, {"org_id": scope.org_id, "kind": kind, "target": target,
                                  "limit": limit}, write=False)
    return [_analysis(r) for r in rows]


_STATS = sa.text("""
SELECT kind, sum(runs) AS runs, sum(model_calls) AS model_calls,
       sum(cache_hits) AS cache_hits, sum(fallbacks) AS fallbacks, sum(cost_usd) AS cost_usd
  FROM analysis_daily
 WHERE org_id = :org_id AND day > (now() AT TIME ZONE 'UTC')::date - CAST(:days AS integer)
 GROUP BY kind ORDER BY kind""")


async def stats(db: Database, scope: Scope, *, days: int = 30) -> list[dict[str, Any]]:
    """Per kind, the last `days` days' runs, model calls, cache hits, fallbacks and cost."""
    rows = await db.fetch(_STATS, {"org_id": scope.org_id, "days": days}, write=False)
    return [{"kind": r["kind"], "runs": int(r["runs"]), "model_calls": int(r["model_calls"]),
             "cache_hits": int(r["cache_hits"]), "fallbacks": int(r["fallbacks"]),
             "cost_usd": Decimal(r["cost_usd"])} for r in rows]


# --- kinds as data ---------------------------------------------------------------------

_PUT_KIND = sa.text("""
INSERT INTO analysis_kinds (id, org_id, name, version, spec)
VALUES (:id, :org_id, :name, 1, CAST(:spec AS jsonb))
ON CONFLICT (org_id, name) DO UPDATE
  SET spec = EXCLUDED.spec, updated_at = now(),
      version = analysis_kinds.version
                + CASE WHEN analysis_kinds.spec = EXCLUDED.spec THEN 0 ELSE 1 END
RETURNING id, name, version, spec, created_at, updated_at""")


def _kind(r: Any) -> KindRow:
    return KindRow(r["id"], r["name"], r["version"], _json(r["spec"]), r["created_at"],
                   r["updated_at"])


async def put_kind(db: Database, scope: Scope, name: str, spec: dict[str, Any]) -> KindRow:
    """Create the org's kind, or replace its spec (its version goes up when it changed)."""
    rows = await db.fetch(_PUT_KIND, {"id": uuid.uuid4(), "org_id": scope.org_id,
                                      "name": name, "spec": jsonenc.dumps(spec)}, write=True)
    return _kind(rows[0])


async def get_kind(db: Database, scope: Scope, name: str) -> KindRow | None:
    rows = await db.fetch(sa.text("SELECT id, name, version, spec, created_at, updated_at "
                                  "FROM analysis_kinds WHERE org_id = :org_id AND name = :name"),
                          {"org_id": scope.org_id, "name": name}, write=False)
    return _kind(rows[0]) if rows else None


async def list_kinds(db: Database, scope: Scope) -> list[KindRow]:
    rows = await db.fetch(sa.text("SELECT id, name, version, spec, created_at, updated_at "
                                  "FROM analysis_kinds WHERE org_id = :org_id ORDER BY name"),
                          {"org_id": scope.org_id}, write=False)
    return [_kind(r) for r in rows]


async def delete_kind(db: Database, scope: Scope, name: str) -> bool:
    rows = await db.fetch(sa.text("DELETE FROM analysis_kinds WHERE org_id = :org_id "
                                  "AND name = :name RETURNING id"),
                          {"org_id": scope.org_id, "name": name}, write=True)
    return bool(rows)


# --- what input builders and validators read -------------------------------------------

async def org_active(db: Database, scope: Scope) -> bool:
    """The org exists and is not suspended (`orgs.settings.suspended`)."""
    rows = await db.fetch(sa.text("SELECT COALESCE(settings->>'suspended', '') <> 'true' AS on "
                                  "FROM orgs WHERE id = :org_id"),
                          {"org_id": scope.org_id}, write=False)
    return bool(rows and rows[0]["on"])


_THREAD_MESSAGES = sa.text("""
SELECT e.kind, e.data FROM events e JOIN threads t ON t.id = e.thread_id
 WHERE e.thread_id = :thread_id AND e.org_id = :org_id AND t.org_id = :org_id
   AND e.kind IN ('message', 'assistant')
 ORDER BY e.seq DESC LIMIT :limit""")


async def thread_messages(db: Database, scope: Scope, thread_id: UUID,
                          limit: int) -> list[dict[str, str]]:
    """The thread's last `limit` user and assistant messages as text, oldest first ([]: no
    such thread in this org, or nothing said yet)."""
    rows = await db.fetch(_THREAD_MESSAGES, {"thread_id": thread_id, "org_id": scope.org_id,
                                             "limit": limit}, write=False)
    out = []
    for r in reversed(rows):
        data = _json(r["data"])
        blocks = data.get("content", []) if isinstance(data, dict) else []
        text = "".join(b.get("text", "") for b in blocks
                       if isinstance(b, dict) and b.get("type") == "text")
        out.append({"role": "user" if r["kind"] == "message" else "assistant", "text": text})
    return out


_TABLES = {"thread": "threads", "analysis": "analyses", "setup": "setups"}


async def existing_ids(db: Database, scope: Scope, record: str, ids: list[str]) -> set[str]:
    """Which of `ids` name a record of this org (`record`: thread, analysis or setup)."""
    table = _TABLES[record]
    valid = []
    for value in ids:
        try:
            valid.append(UUID(value))
        except ValueError:
            continue
    if not valid:
        return set()
    rows = await db.fetch(sa.text(f"SELECT id FROM {table} "
                                  "WHERE org_id = :org_id AND id = ANY(:ids)"),
                          {"org_id": scope.org_id, "ids": valid}, write=False)
    return {str(r["id"]) for r in rows}


# --- evals -----------------------------------------------------------------------------

async def save_eval(db: Database, org_id: UUID | None, *, kind: str, kind_version: int,
                    setup: str, cases: int, passed: int,
                    results: list[dict[str, Any]]) -> UUID:
    run_id = uuid.uuid4()
    await db.fetch(sa.text("""
        INSERT INTO eval_runs (id, org_id, kind, kind_version, setup, cases, passed, results)
        VALUES (:id, :org_id, :kind, :kv, :setup, :cases, :passed, CAST(:results AS jsonb))
        RETURNING id"""), {"id": run_id, "org_id": org_id, "kind": kind, "kv": kind_version,
                           "setup": setup, "cases": cases, "passed": passed,
                           "results": jsonenc.dumps(results)}, write=True)
    return run_id


async def eval_runs(db: Database, org_id: UUID | None, kind: str,
                    limit: int = 20) -> list[dict[str, Any]]:
    rows = await db.fetch(sa.text("""
        SELECT id, kind, kind_version, setup, cases, passed, results, created_at
          FROM eval_runs WHERE kind = :kind AND org_id IS NOT DISTINCT FROM :org_id
         ORDER BY created_at DESC LIMIT :limit"""),
        {"kind": kind, "org_id": org_id, "limit": limit}, write=False)
    return [{**dict(r), "results": _json(r["results"])} for r in rows]


# --- runs started by a turn's end ---------------------------------------------------------

# In the turn's final statement: one `analyses.run` job per kind of the org (or kind in
# code, `:code_kinds`) triggered by `turn_ended`, the thread as target; only while the turn
# is still running (`_turn` has its row), so they exist if and only if the end committed,
# and only for a turn that a user message started.
_TURN_ENDED_RUNS = PartSql("analyses.turn_ended", ctes=("""_an_jobs AS (
  INSERT INTO jobs (org_id, kind, payload, max_attempts)
  SELECT CAST(:org_id AS uuid), :job_kind,
         jsonb_build_object('kind', k.name, 'target', CAST(CAST(:thread_id AS uuid) AS text),
                            'origin', 'turn_ended', 'options', '{}'::jsonb,
                            'then', '[]'::jsonb, 'org', CAST(CAST(:org_id AS uuid) AS text)),
         CAST(:attempts AS integer)
    FROM (SELECT name FROM analysis_kinds
           WHERE org_id = CAST(:org_id AS uuid) AND spec->'triggers' ? 'turn_ended'
          UNION SELECT unnest(CAST(:code_kinds AS text[]))) k
   WHERE EXISTS (SELECT 1 FROM _turn)
     -- Only a turn a person's message started: a turn that only read an analysis's own
     -- notification (apply thread_message) must not trigger it again, in a loop. Checked
     -- only when some kind is triggered (an InitPlan runs at the first row, if any).
     AND EXISTS (SELECT 1 FROM events e
                  WHERE e.thread_id = CAST(:thread_id AS uuid)
                    AND e.turn_id = CAST(:turn_id AS uuid) AND e.kind = 'message')
  RETURNING id
)""",), selects=(f"(SELECT count(pg_notify('{CHANNEL}', '')) FROM _an_jobs) AS analysis_jobs",),
    params=frozenset({"job_kind", "attempts", "code_kinds"}))


@dataclass(frozen=True, slots=True)
class TurnEndedRuns:
    """A step part of a turn's final write: the analyses its end triggers."""

    job_kind: str
    attempts: int
    code_kinds: tuple[str, ...]
    sql: ClassVar[PartSql] = _TURN_ENDED_RUNS

    def values(self) -> dict[str, Any]:
        return {"job_kind": self.job_kind, "attempts": self.attempts,
                "code_kinds": list(self.code_kinds)}
