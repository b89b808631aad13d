"""The inspector: what each model call was sent, what it cost and why the cache broke
(layer: engine; imports agent.inspection, store).

Who may look: the thread's creator and the org's admins; anyone else gets a 404, as for
another org's call (the request record names the prompt layers and tools of someone else's
conversation). Each call comes with a diff against the thread's previous call of the same
kind (agent/inspection.py `diff`).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ator.agent.inspection import diff
from ator.errors import NotFound
from ator.store import model_calls as call_store
from ator.store.database import Database
from ator.store.model_calls import ModelCall
from ator.store.scope import Scope

__all__ = ["Inspector"]


def _may_inspect(scope: Scope, created_by: UUID | None) -> bool:
    return scope.role == "admin" or (scope.user_id is not None and scope.user_id == created_by)


def inspected(call: ModelCall) -> dict[str, Any]:
    """A call as the inspector shows it (the API's and the CLI's view)."""
    meta = dict(call.request_meta)
    return {
        "id": call.id, "thread_id": str(call.thread_id), "turn_id": str(call.turn_id),
        "step": call.step, "purpose": call.purpose, "provider": call.provider,
        "model": call.model, "stop_reason": call.stop_reason,
        "usage": {
            "input_tokens": call.input_tokens, "output_tokens": call.output_tokens,
            "cache_read_tokens": call.cache_read_tokens,
            "cache_write_tokens": call.cache_write_tokens,
            # What the provider counted as the prompt (plain input + cache read + write).
            "reported_input_tokens": (call.input_tokens + call.cache_read_tokens
                                      + call.cache_write_tokens) if call.usage_reported
            else None,
            "reported": call.usage_reported, "estimated": call.usage_estimated,
        },
        "cost_usd": str(call.cost_usd), "priced": call.priced,
        "cost_source": call.cost_source,
        "latency_ms": call.duration_ms, "ttft_ms": meta.pop("ttft_ms", None),
        "request": meta,
        "diff": {"previous_id": call.previous_id, **diff(call.previous_meta, call.request_meta)},
        "created_at": call.created_at.isoformat(),
    }


class Inspector:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def turn_calls(self, scope: Scope, turn_id: UUID) -> list[dict[str, Any]]:
        """The turn's model calls, in order. Raises NotFound for another org's turn or a
        caller who is neither the thread's creator nor an admin."""
        found = await call_store.turn_calls(self._db, scope, turn_id)
        if not _may_inspect(scope, found.created_by):
            raise NotFound("turn not found")
        return [inspected(c) for c in found.calls]

    async def call(self, scope: Scope, call_id: int) -> dict[str, Any]:
        """One model call. Raises NotFound as `turn_calls` does."""
        call, created_by = await call_store.get_call(self._db, scope, call_id)
        if not _may_inspect(scope, created_by):
            raise NotFound("model call not found")
        return inspected(call)
