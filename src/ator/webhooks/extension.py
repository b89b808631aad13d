"""Webhooks as an extension of the engine (layer: webhooks; imports agent.extension, jobs,
net, store.webhooks, workflows.expressions, webhooks.*).

What it contributes: a turn end (`TurnEnded`: the `turn.ended` event, `budget.reached` when
the turn ended on a budget and `approval.requested` when it ended `waiting` on tool calls
held for a person, with their fan-out jobs in the turn's final statement),
three job kinds (`webhooks.dispatch`, `webhooks.deliver`, `webhooks.inbound`) and three
services: `Webhooks` (outbound endpoints, deliveries, replay), `InboundHooks` (receiving
endpoints) and `EventTypes` (the types endpoints may filter on). Its HTTP client and its
expression pool close with the engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ator.agent.extension import Extension, Kernel, Services, TurnEnd
from ator.agent.state import TurnContext, TurnState
from ator.jobs import JobKinds, JobQueue
from ator.net import Egress
from ator.store import turns as turn_store
from ator.store.webhook_outbox import TurnOutbox, envelope
from ator.webhooks.delivery import Deliverer
from ator.webhooks.events import EventTypes
from ator.webhooks.inbound import InboundHooks
from ator.webhooks.service import Webhooks
from ator.webhooks.targets import Targets
from ator.workflows.expressions import Expressions

__all__ = ["TurnEnded", "WebhooksExtension"]


class TurnEnded(TurnEnd):
    """The turn's events, written by the statement that ends the turn."""

    def parts(self, turn: TurnContext, state: TurnState,
              finish: turn_store.Finished) -> Sequence[turn_store.StepPart]:
        data = {"org_id": str(turn.org_id), "thread_id": str(turn.thread_id),
                "turn_id": str(turn.turn_id), "status": finish.status,
                "stop_reason": finish.stop_reason, "error": finish.error,
                "steps": state.steps, "tokens": state.usage.total_tokens,
                "cost_usd": str(state.cost)}
        events = [("turn.ended", envelope("turn.ended", data))]
        if finish.status == "budget":
            events.append(("budget.reached", envelope("budget.reached", data)))
        if finish.status == "waiting":  # calls held for a person: the turn ends with them
            events.append(("approval.requested", envelope("approval.requested", {
                **data, "approvals": "/v1/approvals"})))
        return [TurnOutbox(tuple(events))]

    async def committed(self, turn: TurnContext, write: turn_store.StepWrite) -> None:
        return None  # the jobs written with the turn's end do the rest


class WebhooksExtension(Extension):
    name = "webhooks"

    def __init__(self, kernel: Kernel) -> None:
        s = kernel.settings
        egress = Egress.from_settings(s)
        self._kinds = JobKinds()
        # The queue only needs this extension's own kinds (attempts, priority) to enqueue.
        queue = JobQueue(kernel.db, self._kinds)
        self.event_types = EventTypes()
        self.expressions = Expressions(timeout_ms=s.workflow_expr_timeout_ms,
                                       depth=s.workflow_expr_depth,
                                       value_bytes=s.workflow_value_bytes, threads=2)
        self.deliverer = Deliverer(s, kernel.db, kernel.master_key, queue, egress)
        self.outbound = Webhooks(kernel.db, kernel.master_key, queue, egress, self.event_types)
        self.targets = targets = Targets(kernel.db, kernel.waker)
        self.inbound = InboundHooks(s, kernel.db, kernel.master_key, queue, self.expressions,
                                    targets)
        for kind in (*self.deliverer.kinds(), *self.inbound.kinds()):
            self._kinds.register(kind)
        self._end = TurnEnded()

    def ends(self) -> Sequence[TurnEnd]:
        return [self._end]

    def bound(self, services: Services) -> None:
        self.targets.services = services  # an inbound webhook may start a workflow run

    def job_kinds(self) -> Sequence[Any]:
        return list(self._kinds)

    def services(self) -> Mapping[type, object]:
        return {Webhooks: self.outbound, InboundHooks: self.inbound,
                EventTypes: self.event_types}

    async def aclose(self) -> None:
        await self.deliverer.aclose()
        self.expressions.close()
