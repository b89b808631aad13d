"""Loop hooks: the seam features plug into instead of growing branches in the loop (layer:
agent; imports agent.state, errors, providers.base, store.parts, tools).

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

- `hold(turn, state, calls, tools)`: a step asked for tools; before any runs, a hook may
  *hold* some of the (schema-valid) calls (`Hold`): a held call does not run now. The loop
  runs the others, then the step writer persists the reply, their results, every hold's
  `parts` (a pending action, its expiry job, an outbox row…) and the turn's end, stop
  reason `held` and status `waiting`, in one statement; the thread goes idle. Whoever
  decides later answers the held call with a `tool_results` item in the thread's mailbox
  (`agent/history.py` keeps a held call open across the turn's end for it).

Hooks run in the order given; each sees what the previous one returned (a call one hook
held is not offered to the next).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from ator.agent.state import TurnContext, TurnState
from ator.errors import ProviderError
from ator.providers.base import ModelRequest
from ator.store.parts import StepPart
from ator.tools.base import ToolCall
from ator.tools.registry import ToolRegistry

__all__ = ["HELD", "Hold", "Injection", "LoopHook", "StopTurn"]

#: The stop reason of a turn that ended because a hook held some of its tool calls.
HELD = "held"


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


@dataclass(frozen=True, slots=True)
class Hold:
    """A tool call a hook keeps from running now. `parts` join the statement that persists
    the step and ends the turn (what records the hold: a pending action); `note` is what the
    turn's end says of it (`turn_ended.data.held[]`, with the call's id and name)."""

    call: ToolCall
    parts: tuple[StepPart, ...] = ()
    note: dict[str, Any] = field(default_factory=dict)


class LoopHook:
    """Base class with no-op defaults: override the points you need."""

    def reads_spend(self, turn: TurnContext) -> bool:
        """Whether this call's `before_call` reads what the turn's own writes change (its
        spend, steps or tokens in the store: a budget, a cap). The loop then makes the turn's
        last step durable before the hooks run (a tool step is otherwise held while the next
        call runs, and written with its reply when that is fast). By default a hook that
        overrides `before_call` does; one that reads nothing of the kind says so."""
        return type(self).before_call is not LoopHook.before_call

    async def before_call(
        self, turn: TurnContext, state: TurnState, request: ModelRequest
    ) -> ModelRequest:
        return request

    async def between_steps(self, turn: TurnContext, state: TurnState) -> Sequence[Injection]:
        return ()

    async def hold(
        self, turn: TurnContext, state: TurnState, calls: Sequence[ToolCall],
        tools: ToolRegistry,
    ) -> Sequence[Hold]:
        """The calls (among `calls`, all valid for `tools`) this hook keeps from running."""
        return ()

    async def on_overflow(
        self, turn: TurnContext, state: TurnState, error: ProviderError
    ) -> bool:
        """True when this hook will make the retried request smaller."""
        return False
