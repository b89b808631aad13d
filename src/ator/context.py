"""Per-request and per-turn context in contextvars (layer: bottom; imports nothing of ator).

Set at the edge (an API request, a turn starting) and read by logging, so every log line
carries the org, thread, turn and request it belongs to without threading ids through calls.
"""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["current_ids", "org_id_var", "request_id_var", "thread_id_var", "turn_id_var"]

org_id_var: ContextVar[str | None] = ContextVar("ator_org_id", default=None)
thread_id_var: ContextVar[str | None] = ContextVar("ator_thread_id", default=None)
turn_id_var: ContextVar[str | None] = ContextVar("ator_turn_id", default=None)
request_id_var: ContextVar[str | None] = ContextVar("ator_request_id", default=None)


def current_ids() -> dict[str, str]:
    ids = {
        "org_id": org_id_var.get(),
        "thread_id": thread_id_var.get(),
        "turn_id": turn_id_var.get(),
        "request_id": request_id_var.get(),
    }
    return {k: v for k, v in ids.items() if v is not None}
