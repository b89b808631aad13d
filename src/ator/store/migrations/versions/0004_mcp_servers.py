"""Tools and MCP: an org's MCP servers, and tool results stored whole when they exceed the
cap a model reads at once.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mcp_servers",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("transport", sa.Text, nullable=False),
        sa.Column("url", sa.Text, nullable=True),
        sa.Column("headers", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("timeout_s", sa.Float, nullable=False, server_default="30"),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("allow", JSONB, nullable=True),
        sa.Column("deny", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
        sa.Column("catalog", JSONB, nullable=True),
        sa.Column("last_test", JSONB, nullable=True),
        sa.Column("version", sa.Integer, nullable=False, server_default="1"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.UniqueConstraint("org_id", "name", name="uq_mcp_servers_org_name"),
        sa.CheckConstraint("transport in ('http','stdio')", name="ck_mcp_servers_transport"),
    )
    op.create_table(
        "tool_results",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("thread_id", UUID(as_uuid=True), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
    )
    op.create_index("ix_tool_results_thread", "tool_results", ["org_id", "thread_id"])


def downgrade() -> None:
    op.drop_index("ix_tool_results_thread", table_name="tool_results")
    op.drop_table("tool_results")
    op.drop_table("mcp_servers")
