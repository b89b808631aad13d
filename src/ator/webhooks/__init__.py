"""Webhooks in and out (layer: webhooks — an extension of the engine, beside subagents;
imports agent.extension, jobs, net, security, store, errors, settings).

Outbound: org endpoints, an outbox written with what it reports, Standard Webhooks
deliveries on the jobs kernel (`delivery.py`). Inbound: `/v1/hooks/{id}` kept raw before
the 2xx, then mapped into a thread (`inbound.py`).
"""

from ator.store.webhooks import Attempt, Delivery, Endpoint, Inbound
from ator.webhooks.extension import TurnEnded, WebhooksExtension
from ator.webhooks.inbound import InboundHooks
from ator.webhooks.service import EVENT_TYPES, Webhooks
from ator.webhooks.signing import BadSignature

__all__ = ["EVENT_TYPES", "Attempt", "BadSignature", "Delivery", "Endpoint", "Inbound",
           "InboundHooks", "TurnEnded", "Webhooks", "WebhooksExtension"]
