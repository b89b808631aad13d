"""Loop hooks: the seam features plug into instead of growing branches in the loop (layer:
agent; imports agent.state, errors, providers.base).

A hook may act at two points of every turn:

- `before_call(turn, state, request)`: just before each model call; returns the request to
  send (compaction, prompt layers, a tool list change) or raises `StopTurn` to end the turn
  gracefully with a typed reason (a budget that does not fit, a cap).
- `between_steps(turn, state)`: after a step's tool results are persisted and before the
  next call; returns items to inject (subagent results, notices). The loop persists them
  first and only then shows them to the model, labelled as data (persist, then inject).
- `on_overflow(turn, state, error)`: the provider refused the call as too long for its
  context or its transport (`ProviderError(kind="context_overflow")`). A hook that can make
  the next request smaller (compaction) prepares that and returns True; the loop then builds
  the request again, runs every `before_call`, and retries once. A second overflow ends the
  turn with `error:context_overflow`.

Hooks run in the order given; each sees what the previous one returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from ator.agent.state import TurnContext, TurnState
from ator.errors import ProviderError
from ator.providers.base import ModelRequest

__all__ = ["Injection", "LoopHook", "StopTurn"]


class StopTurn(Exception):
    """Raised by a hook to end the turn before the call, with a typed stop reason."""

    def __init__(self, reason: str, message: str | None = None) -> None:
        super().__init__(message or reason)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class Injection:
    """Something to persist as an event of the turn and show the model between steps.
    `kind` is an event kind the history understands (`notification`); `data` carries at
    least `text` and `source`. `mailbox_ids` are pending mailbox items of the thread this
    injection shows: the write that persists it also takes them into the turn, so the next
    turn's start never shows them again."""

    kind: str
    data: dict[str, Any] = field(default_factory=dict)
    mailbox_ids: tuple[UUID, ...] = ()


class LoopHook:
    """Base class with no-op defaults: override the points you need."""

    async def before_call(
        self, turn: TurnContext, state: TurnState, request: ModelRequest
    ) -> ModelRequest:
        return request

    async def between_steps(self, turn: TurnContext, state: TurnState) -> Sequence[Injection]:
        return ()

    async def on_overflow(
        self, turn: TurnContext, state: TurnState, error: ProviderError
    ) -> bool:
        """True when this hook will make the retried request smaller."""
        return False
