"""The org's budget as a loop hook: every model call reserves its worst case first (layer:
engine; imports agent, providers.size, cost, store, whole).

Before each call, for an org with a limit (its own monthly budget, or the operator's
ceiling, whichever is lower), the gate estimates the request's input tokens and reserves
the call's worst case (that input at the dearest input price plus `max_output_tokens`) in
the ledger, atomically across replicas (store/ledger.py). A reservation that does not fit
ends the turn with `budget` before any money is spent. The step write that records the call
settles the reservation to the real cost (the step writer releases `state.reserved_usd`).
A model with no price cannot be reserved for: with `fail_closed` (the default) a budgeted
org refuses it. An org without a limit costs no statement here.

A turn cut while its reservation is in flight (the turn's timeout, a stop) still learns
whether the reservation committed (ator.whole), so the turn's end gives it back at once
instead of leaving it held until the reaper's sweep.
"""

from __future__ import annotations

from decimal import Decimal

from ator.agent.hooks import LoopHook, StopTurn
from ator.agent.state import TurnContext, TurnState
from ator.cost.estimate import worst_case_usd
from ator.cost.prices import PriceTable
from ator.providers.base import ModelRequest
from ator.providers.size import request_tokens
from ator.store import ledger
from ator.store.database import Database
from ator.store.scope import Scope
from ator.whole import whole

__all__ = ["BudgetGate"]


class BudgetGate(LoopHook):
    def __init__(
        self, *, db: Database, prices: PriceTable, limit: Decimal | None, fail_closed: bool
    ) -> None:
        self.db = db
        self.prices = prices
        self.limit = limit
        self.fail_closed = fail_closed

    def reads_spend(self, turn: TurnContext) -> bool:
        return self.limit is not None  # the ledger's spend, which the step writes settle

    async def before_call(
        self, turn: TurnContext, state: TurnState, request: ModelRequest
    ) -> ModelRequest:
        if self.limit is None or state.reserved_usd > 0:
            return request  # no budget; or a retry of a call that is already reserved
        worst = worst_case_usd(self.prices, request.model, request_tokens(request),
                               request.max_tokens)
        if worst is None:
            if self.fail_closed:
                raise StopTurn("budget", "the model has no price, so spend against the "
                                         "budget cannot be measured")
            return request

        async def reserve() -> ledger.Reservation:
            held = await ledger.reserve(self.db, Scope(turn.org_id), turn.turn_id, worst)
            if held.held:
                state.reserved_usd = worst  # what the turn's end gives back if not billed
            return held

        held = await whole(reserve())
        if not held.held:
            raise StopTurn("budget", held.refusal(worst))
        return request
