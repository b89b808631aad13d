"""The org's budget as a loop hook: checked before every model call (layer: engine; imports
agent, cost).

Before each call the gate checks the org's remaining budget and ends the turn with `budget`
(a typed stop, before any money is spent) when it is used up, or when the model has no
price and the operator wants spend to be measurable (fail closed).
"""

from __future__ import annotations

from decimal import Decimal

from ator.agent.hooks import LoopHook, StopTurn
from ator.agent.state import TurnContext, TurnState
from ator.providers.base import ModelRequest

__all__ = ["BudgetGate"]


class BudgetGate(LoopHook):
    def __init__(
        self, *, limit: Decimal | None, spent_at_start: Decimal, priced: bool, fail_closed: bool
    ) -> None:
        self.limit = limit
        self.spent_at_start = spent_at_start
        self.priced = priced
        self.fail_closed = fail_closed

    async def before_call(
        self, turn: TurnContext, state: TurnState, request: ModelRequest
    ) -> ModelRequest:
        if self.limit is None:
            return request
        spent = self.spent_at_start + state.cost
        if spent >= self.limit:
            raise StopTurn("budget", f"the org's monthly budget of ${self.limit} is spent "
                                     f"(${spent})")
        if not self.priced and self.fail_closed:
            raise StopTurn("budget", "the model has no price, so spend against the budget "
                                     "cannot be measured")
        return request
