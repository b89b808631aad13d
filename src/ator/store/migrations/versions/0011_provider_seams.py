"""Open provider and tool seams: where a call's cost came from, a provider's state per
thread, and the audit of tools run outside a turn.

Revision ID: 0011
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # catalog: usage x the model's price; provider: the provider reported the cost itself;
    # unpriced: neither (0, flagged). Existing rows keep what `priced` said.
    op.add_column("model_calls", sa.Column("cost_source", sa.Text, nullable=False,
                                           server_default="catalog"))
    op.execute("UPDATE model_calls SET cost_source = 'unpriced' WHERE NOT priced")
    op.create_table(
        "provider_sessions",
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("thread_id", UUID(as_uuid=True), nullable=False),
        sa.Column("provider", sa.Text, nullable=False),
        sa.Column("state", JSONB, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.PrimaryKeyConstraint("thread_id", "provider"),
    )
    op.create_table(
        "tool_audit",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("principal_kind", sa.Text, nullable=False),
        sa.Column("principal_id", UUID(as_uuid=True), nullable=False),
        sa.Column("tool", sa.Text, nullable=False),
        sa.Column("args_sha256", sa.Text, nullable=False),
        sa.Column("duration_ms", sa.Integer, nullable=False),
        sa.Column("result_chars", sa.Integer, nullable=False),
        sa.Column("outcome", sa.Text, nullable=False),
        sa.Column("error_code", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.CheckConstraint("principal_kind in ('user','key')", name="ck_tool_audit_principal"),
        sa.CheckConstraint("outcome in ('ok','error')", name="ck_tool_audit_outcome"),
    )
    op.create_index("ix_tool_audit_org_created", "tool_audit", ["org_id", "created_at", "id"])


def downgrade() -> None:
    op.drop_table("tool_audit")
    op.drop_table("provider_sessions")
    op.drop_column("model_calls", "cost_source")
