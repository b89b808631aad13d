"""Webhooks in and out (layer: webhooks — an extension of the engine, above workflows, whose
runs an inbound webhook may start; imports agent.extension, jobs, net, security, store,
workflows, errors, settings).

Outbound: org endpoints, an outbox written with what it reports, Standard Webhooks
deliveries on the jobs kernel (`delivery.py`), the event types (`events.py`). Inbound:
`/v1/hooks/{id}` verified (`verification.py`) and kept raw before the 2xx, then mapped
(`mapping.py`) into a thread or a workflow run (`targets.py`).
"""

from ator.store.webhook_inbound import Inbound, Received
from ator.store.webhooks import Attempt, Delivery, Endpoint
from ator.webhooks.events import CATALOG, EventType, EventTypes
from ator.webhooks.extension import TurnEnded, WebhooksExtension
from ator.webhooks.inbound import InboundHooks
from ator.webhooks.service import Webhooks
from ator.webhooks.signing import BadSignature

__all__ = ["CATALOG", "Attempt", "BadSignature", "Delivery", "Endpoint", "EventType",
           "EventTypes", "Inbound", "InboundHooks", "Received", "TurnEnded", "Webhooks",
           "WebhooksExtension"]
