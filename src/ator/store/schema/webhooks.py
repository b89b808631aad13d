"""Webhook tables: outbound endpoints, events, deliveries and attempts; inbound endpoints,
the threads their mapping keys reach, and what they received.

Layer: store; imports sqlalchemy and ator.store.schema.columns only. Part of
`ator.store.schema`, on its one `metadata` (see that package's docstring).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB, UUID

from ator.store.schema.columns import _created, _org, _org_hot, metadata

__all__ = [
    "webhook_attempts",
    "webhook_deliveries",
    "webhook_endpoints",
    "webhook_events",
    "webhook_inbound",
    "webhook_received",
    "webhook_threads",
]

# Webhooks (ator.webhooks, store/webhooks.py). Outbound: an org's endpoints, the outbox of
# events (written in the transaction of what they report), one delivery per (endpoint, event)
# and its log of attempts. Inbound: an org's receiving endpoints and every request they
# accepted, kept raw before the 2xx and unique per (endpoint, webhook id).
webhook_endpoints = sa.Table(
    "webhook_endpoints",
    metadata,
    sa.Column("id", UUID(as_uuid=True), primary_key=True),
    _org(),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("description", sa.Text, nullable=False, server_default=""),
    sa.Column("event_types", sa.ARRAY(sa.Text), nullable=False, server_default="{}"),
    sa.Column("secret_nonce", sa.LargeBinary, nullable=False),
    sa.Column("secret_ct", sa.LargeBinary, nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("disabled_reason", sa.Text, nullable=True),
    # The secret before the last rotation, still signing until `previous_until`.
    sa.Column("previous_nonce", sa.LargeBinary, nullable=True),
    sa.Column("previous_ct", sa.LargeBinary, nullable=True),
    sa.Column("previous_until", sa.DateTime(timezone=True), nullable=True),
    # Since when every attempt failed (NULL after a success): too long disables it.
    sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True),
    _created(),
    sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True),
    sa.Index("ix_webhook_endpoints_org", "org_id"),
)


webhook_events = sa.Table(
    "webhook_events",
    metadata,
    sa.Column("id", UUID(as_uuid=True), primary_key=True),
    _org_hot(),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),  # the exact bytes every attempt signs
    _created(),
    sa.Index("ix_webhook_events_org", "org_id", "created_at"),
)


webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("id", UUID(as_uuid=True), primary_key=True),
    _org_hot(),
    sa.Column("endpoint_id", UUID(as_uuid=True),
              sa.ForeignKey("webhook_endpoints.id", ondelete="CASCADE"), nullable=False),
    sa.Column("event_id", UUID(as_uuid=True),
              sa.ForeignKey("webhook_events.id", ondelete="CASCADE"), nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default="pending"),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_status", sa.Integer, nullable=True),
    _created(),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    sa.UniqueConstraint("endpoint_id", "event_id", name="uq_webhook_deliveries_endpoint_event"),
    sa.CheckConstraint("status in ('pending','delivered','failed','skipped')",
                       name="ck_webhook_deliveries_status"),
    sa.Index("ix_webhook_deliveries_endpoint", "endpoint_id", "created_at"),
)


webhook_attempts = sa.Table(
    "webhook_attempts",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    _org_hot(),
    sa.Column("delivery_id", UUID(as_uuid=True),
              sa.ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("status_code", sa.Integer, nullable=True),
    sa.Column("latency_ms", sa.Integer, nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("response_excerpt", sa.Text, nullable=True),
    _created(),
    sa.Index("ix_webhook_attempts_delivery", "delivery_id", "attempt"),
)


webhook_inbound = sa.Table(
    "webhook_inbound",
    metadata,
    sa.Column("id", UUID(as_uuid=True), primary_key=True),
    _org(),
    sa.Column("name", sa.Text, nullable=False),
    # The fixed thread of a mapping `{"to": "thread", "thread_id": …}` (NULL otherwise).
    sa.Column("thread_id", UUID(as_uuid=True), sa.ForeignKey("threads.id", ondelete="CASCADE"),
              nullable=True),
    sa.Column("mapping", JSONB, nullable=False),
    sa.Column("secret_nonce", sa.LargeBinary, nullable=False),
    sa.Column("secret_ct", sa.LargeBinary, nullable=False),
    _created(),
    sa.Column("verification", JSONB, nullable=False,
              server_default=sa.text("""'{"method": "standard_webhooks"}'::jsonb""")),
    sa.Column("max_bytes", sa.Integer, nullable=True),
    sa.Index("ix_webhook_inbound_org", "org_id"),
)


# The thread each inbound mapping key reaches (migration 0019).
webhook_threads = sa.Table(
    "webhook_threads",
    metadata,
    sa.Column("endpoint_id", UUID(as_uuid=True),
              sa.ForeignKey("webhook_inbound.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("key", sa.Text, primary_key=True),
    _org_hot(),
    sa.Column("thread_id", UUID(as_uuid=True), sa.ForeignKey("threads.id", ondelete="CASCADE"),
              nullable=False),
    _created(),
)


webhook_received = sa.Table(
    "webhook_received",
    metadata,
    sa.Column("id", UUID(as_uuid=True), primary_key=True),
    _org_hot(),
    sa.Column("endpoint_id", UUID(as_uuid=True),
              sa.ForeignKey("webhook_inbound.id", ondelete="CASCADE"), nullable=False),
    sa.Column("webhook_id", sa.Text, nullable=False),
    sa.Column("headers", JSONB, nullable=False),
    sa.Column("body", sa.LargeBinary, nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default="received"),
    sa.Column("error", sa.Text, nullable=True),
    _created(),
    sa.Column("result", JSONB, nullable=True),  # what it became: {thread_id} or {run_id}
    sa.UniqueConstraint("endpoint_id", "webhook_id", name="uq_webhook_received_endpoint_id"),
    sa.CheckConstraint("status in ('received','delivered','failed')",
                       name="ck_webhook_received_status"),
    sa.Index("ix_webhook_received_endpoint", "endpoint_id", "created_at"),
)

