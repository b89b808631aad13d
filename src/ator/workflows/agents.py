"""What a turn of an agent step knows and may do (layer: workflows; imports agent,
cost, providers.size, store, subagents.tools, workflows.tools).

A thread bound to an agent step (store/workflow_threads.py) carries `WorkflowTurn` in
each of its turns (a per-turn field read in the turn's start statement). It narrows the
turn's tools: subagent tools are denied (parallelism inside a workflow is a budgeted
`map`), and so are the governance tools (`GOVERNANCE`: starting and cancelling runs; no
tool decides a gate, which a person does over the API). `RunBudget`, a loop hook, checks
the run's `usd` budget before every model call: settled spend of the run's turns, what its
other agent steps hold for the calls they are making, and this call's worst case must fit
(`store.workflow_threads.hold`, which then holds it), else the turn ends `budget` before
the call, and the step's run ends `budget`. Concurrent steps of a `map` therefore cannot
together overshoot the budget: each call is admitted against every call in flight.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from uuid import UUID

from ator.agent.hooks import LoopHook, StopTurn
from ator.agent.state import TurnContext, TurnState
from ator.cost.estimate import over_cap, worst_case_usd
from ator.cost.prices import PriceTable
from ator.providers.base import ModelRequest
from ator.providers.size import request_tokens
from ator.store import workflow_threads as thread_store
from ator.store.database import Database
from ator.store.scope import Scope
from ator.subagents.tools import subagent_tools
from ator.workflows.tools import GOVERNANCE

__all__ = ["RunBudget", "WorkflowTurn"]

_DENIED = (*(t.name for t in subagent_tools()), *GOVERNANCE)


@dataclass(frozen=True, slots=True)
class WorkflowTurn:
    """A turn's agent step: its run, its step and the run's usd budget (None: unbounded
    by the run; the org's ledger still applies)."""

    run_id: UUID
    step_id: UUID
    usd: Decimal | None

    @classmethod
    def build(cls, value: Any) -> WorkflowTurn | None:
        if not value:
            return None
        usd = value.get("usd")
        return cls(UUID(str(value["run_id"])), UUID(str(value["step_id"])),
                   Decimal(str(usd)) if usd is not None else None)

    def tool_bounds(self) -> Sequence[Mapping[str, Any]]:
        return [{"allow": None, "deny": list(_DENIED)}]


class RunBudget(LoopHook):
    def __init__(self, db: Database, prices: PriceTable) -> None:
        self.db = db
        self.prices = prices

    def reads_spend(self, turn: TurnContext) -> bool:
        place = turn.get(WorkflowTurn)
        return place is not None and place.usd is not None

    async def before_call(self, turn: TurnContext, state: TurnState,
                          request: ModelRequest) -> ModelRequest:
        place = turn.get(WorkflowTurn)
        if place is None or place.usd is None:
            return request
        # An unpriced model records 0 and is checked at 0 (the org's ledger fails closed).
        worst = worst_case_usd(self.prices, request.model, request_tokens(request),
                               request.max_tokens) or Decimal(0)
        got = await thread_store.hold(self.db, Scope(turn.org_id), place.run_id,
                                      turn.turn_id, worst, place.usd)
        if not got.ok:
            in_use = got.spent + got.held
            raise StopTurn("budget", over_cap("the workflow run's budget", "usd", in_use,
                                              worst, place.usd)
                           or f"the workflow run's budget: ${in_use} of ${place.usd} is "
                              f"spent or held by calls in flight")
        return request
