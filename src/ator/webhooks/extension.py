"""Webhooks as an extension of the engine (layer: webhooks; imports agent.extension, jobs,
net, store.webhooks, webhooks.*).

What it contributes: a turn end (`TurnEnded`: the `turn.ended` event and its fan-out job
in the turn's final statement), three job kinds (`webhooks.dispatch`, `webhooks.deliver`,
`webhooks.inbound`) and two services, `Webhooks` (outbound endpoints, deliveries, replay)
and `InboundHooks` (receiving endpoints). Its HTTP client closes with the engine.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ator import jsonenc
from ator.agent.extension import Extension, Kernel, TurnEnd
from ator.agent.state import TurnContext, TurnState
from ator.jobs import JobKinds, JobQueue
from ator.net import Egress
from ator.store import turns as turn_store
from ator.store.webhooks import TurnEndedOutbox
from ator.webhooks.delivery import DISPATCH, Deliverer
from ator.webhooks.inbound import InboundHooks
from ator.webhooks.service import Webhooks

__all__ = ["TurnEnded", "WebhooksExtension"]


class TurnEnded(TurnEnd):
    """The `turn.ended` event, written by the statement that ends the turn."""

    def __init__(self, max_attempts: int) -> None:
        self.max_attempts = max_attempts

    def parts(self, turn: TurnContext, state: TurnState,
              finish: turn_store.Finished) -> Sequence[turn_store.StepPart]:
        body = jsonenc.dumps({
            "type": "turn.ended", "timestamp": datetime.now(UTC).isoformat(),
            "data": {"org_id": str(turn.org_id), "thread_id": str(turn.thread_id),
                     "turn_id": str(turn.turn_id), "status": finish.status,
                     "stop_reason": finish.stop_reason, "error": finish.error,
                     "steps": state.steps, "tokens": state.usage.total_tokens,
                     "cost_usd": str(state.cost)}})
        return [TurnEndedOutbox(uuid.uuid4(), body, DISPATCH, self.max_attempts)]

    async def committed(self, turn: TurnContext, write: turn_store.StepWrite) -> None:
        return None  # the job written with the turn's end does the rest


class WebhooksExtension(Extension):
    name = "webhooks"

    def __init__(self, kernel: Kernel) -> None:
        egress = Egress.from_settings(kernel.settings)
        self._kinds = JobKinds()
        # The queue only needs this extension's own kinds (attempts, priority) to enqueue.
        queue = JobQueue(kernel.db, self._kinds)
        self.deliverer = Deliverer(kernel.settings, kernel.db, kernel.master_key, queue, egress)
        self.outbound = Webhooks(kernel.db, kernel.master_key, queue, egress)
        self.inbound = InboundHooks(kernel.settings, kernel.db, kernel.master_key, queue,
                                    kernel.waker)
        for kind in (*self.deliverer.kinds(), *self.inbound.kinds()):
            self._kinds.register(kind)
        self._end = TurnEnded(self._kinds.get(DISPATCH).max_attempts)

    def ends(self) -> Sequence[TurnEnd]:
        return [self._end]

    def job_kinds(self) -> Sequence[Any]:
        return list(self._kinds)

    def services(self) -> Mapping[type, object]:
        return {Webhooks: self.outbound, InboundHooks: self.inbound}

    async def aclose(self) -> None:
        await self.deliverer.aclose()
