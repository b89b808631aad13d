"""Reading model calls back for the inspector (layer: store; imports sqlalchemy,
ator.store.*).

Calls are written by the step's own statement (store/turns.py `Billed`); this module only
reads them, each with the thread's creator (who may inspect it) and the thread's previous
call of the same kind (what the inspector diffs it against). Compaction calls are compared
with compaction calls, steps with steps: their requests have nothing in common.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ator.errors import NotFound
from ator.store.database import Database, first
from ator.store.schema import model_calls, threads, turns
from ator.store.scope import Scope

__all__ = ["ModelCall", "TurnCalls", "get_call", "turn_calls"]


@dataclass(frozen=True, slots=True)
class ModelCall:
    id: int
    thread_id: UUID
    turn_id: UUID
    step: int
    purpose: str
    provider: str
    model: str
    stop_reason: str | None
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    usage_reported: bool
    usage_estimated: bool
    cost_usd: Decimal
    priced: bool
    duration_ms: int
    request_meta: dict[str, Any]
    created_at: datetime
    previous_id: int | None = None
    previous_meta: dict[str, Any] | None = None
    cost_source: str = "catalog"  # catalog, provider (it reported the cost), unpriced


@dataclass(frozen=True, slots=True)
class TurnCalls:
    thread_id: UUID
    created_by: UUID | None  # the thread's creator
    calls: list[ModelCall]


def _is_compaction(purpose: Any) -> Any:
    return purpose == "compaction"


def _with_previous() -> Any:
    """model_calls with, per row, the thread's previous call of the same kind."""
    mc = model_calls
    prev = model_calls.alias("prev")
    previous = (
        sa.select(prev.c.id, prev.c.request_meta)
        .where(prev.c.thread_id == mc.c.thread_id, prev.c.org_id == mc.c.org_id,
               prev.c.id < mc.c.id,
               _is_compaction(prev.c.purpose) == _is_compaction(mc.c.purpose))
        .order_by(prev.c.id.desc())
        .limit(1)
        .lateral("p")
    )
    return (
        sa.select(mc, previous.c.id.label("previous_id"),
                  previous.c.request_meta.label("previous_meta"))
        .select_from(mc.outerjoin(previous, sa.true()))
    )


def _call(r: Any) -> ModelCall:
    return ModelCall(
        r.id, r.thread_id, r.turn_id, r.step, r.purpose, r.provider, r.model, r.stop_reason,
        r.input_tokens, r.output_tokens, r.cache_read_tokens, r.cache_write_tokens,
        r.usage_reported, r.usage_estimated, r.cost_usd, r.priced, r.duration_ms,
        r.request_meta, r.created_at, r.previous_id, r.previous_meta, r.cost_source,
    )


async def turn_calls(db: Database, scope: Scope, turn_id: UUID) -> TurnCalls:
    """The turn's model calls in order, each with its previous call. Raises NotFound when
    the turn is not this org's."""
    owner = first(await db.read(
        sa.select(turns.c.thread_id, threads.c.created_by)
        .select_from(turns.join(threads, threads.c.id == turns.c.thread_id))
        .where(turns.c.id == turn_id, turns.c.org_id == scope.org_id,
               threads.c.org_id == scope.org_id)))
    if owner is None:
        raise NotFound("turn not found")
    rows = await db.read(
        _with_previous()
        .where(model_calls.c.turn_id == turn_id, model_calls.c.org_id == scope.org_id)
        .order_by(model_calls.c.id))
    return TurnCalls(owner.thread_id, owner.created_by, [_call(r) for r in rows])


async def get_call(db: Database, scope: Scope, call_id: int) -> tuple[ModelCall, UUID | None]:
    """One call with its previous call, and its thread's creator. Raises NotFound when it is
    not this org's."""
    query = (
        _with_previous()
        .add_columns(threads.c.created_by)
        .join(threads, threads.c.id == model_calls.c.thread_id)
        .where(model_calls.c.id == call_id, model_calls.c.org_id == scope.org_id,
               threads.c.org_id == scope.org_id)
    )
    row = first(await db.read(query))
    if row is None:
        raise NotFound("model call not found")
    return _call(row), row.created_by
