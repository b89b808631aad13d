"""Webhooks: outbound endpoints, the outbox of events, deliveries and their attempts;
inbound endpoints and the raw requests they accepted.

Revision ID: 0014
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0014"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                  nullable=False),
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
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
    )

    op.create_table(
        "webhook_events",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),  # the exact bytes every attempt signs
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
    )

    op.create_table(
        "webhook_deliveries",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("endpoint_id", UUID(as_uuid=True),
                  sa.ForeignKey("webhook_endpoints.id", ondelete="CASCADE"), nullable=False),
        sa.Column("event_id", UUID(as_uuid=True),
                  sa.ForeignKey("webhook_events.id", ondelete="CASCADE"), nullable=False),
        sa.Column("status", sa.Text, nullable=False, server_default="pending"),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_status", sa.Integer, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("endpoint_id", "event_id", name="uq_webhook_deliveries_endpoint_event"),
        sa.CheckConstraint("status in ('pending','delivered','failed','skipped')",
                               name="ck_webhook_deliveries_status"),
    )

    op.create_table(
        "webhook_attempts",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("delivery_id", UUID(as_uuid=True),
                  sa.ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("status_code", sa.Integer, nullable=True),
        sa.Column("latency_ms", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("response_excerpt", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
    )

    op.create_table(
        "webhook_inbound",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("thread_id", UUID(as_uuid=True), sa.ForeignKey("threads.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("mapping", JSONB, nullable=False),
        sa.Column("secret_nonce", sa.LargeBinary, nullable=False),
        sa.Column("secret_ct", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
    )

    op.create_table(
        "webhook_received",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("endpoint_id", UUID(as_uuid=True),
                  sa.ForeignKey("webhook_inbound.id", ondelete="CASCADE"), nullable=False),
        sa.Column("webhook_id", sa.Text, nullable=False),
        sa.Column("headers", JSONB, nullable=False),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sa.Column("status", sa.Text, nullable=False, server_default="received"),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.UniqueConstraint("endpoint_id", "webhook_id", name="uq_webhook_received_endpoint_id"),
        sa.CheckConstraint("status in ('received','delivered','failed')",
                               name="ck_webhook_received_status"),
    )
    op.create_index("ix_webhook_endpoints_org", "webhook_endpoints", ["org_id"])
    op.create_index("ix_webhook_events_org", "webhook_events", ["org_id", "created_at"])
    op.create_index("ix_webhook_deliveries_endpoint", "webhook_deliveries", ["endpoint_id", "created_at"])
    op.create_index("ix_webhook_attempts_delivery", "webhook_attempts", ["delivery_id", "attempt"])
    op.create_index("ix_webhook_inbound_org", "webhook_inbound", ["org_id"])


def downgrade() -> None:
    op.drop_table("webhook_received")
    op.drop_table("webhook_inbound")
    op.drop_table("webhook_attempts")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_events")
    op.drop_table("webhook_endpoints")
