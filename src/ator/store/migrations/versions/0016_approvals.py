"""Approvals: a turn may end `waiting` (its tool calls held for a person's decision), and the
pending actions people decide (a tool call; later a workflow gate), each decided once.

Revision ID: 0016
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_NEW = "('running','done','capped','budget','refused','waiting','stopped','lost','error')"
_OLD = "('running','done','capped','budget','refused','stopped','lost','error')"


def upgrade() -> None:
    op.drop_constraint("ck_turns_status", "turns", type_="check")
    op.create_check_constraint("ck_turns_status", "turns", f"status in {_NEW}")
    op.create_table(
        "pending_actions",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False, server_default="pending"),
        sa.Column("thread_id", UUID(as_uuid=True), nullable=True),
        sa.Column("turn_id", UUID(as_uuid=True), nullable=True),
        sa.Column("tool_use_id", sa.Text, nullable=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("arguments", JSONB, nullable=False),
        sa.Column("subject", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("decided_arguments", JSONB, nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("decided_by", UUID(as_uuid=True), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("result", JSONB, nullable=True),
        sa.Column("executed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.CheckConstraint("status in ('pending','approved','denied','expired')",
                           name="ck_pending_actions_status"),
    )
    op.create_index("ix_pending_actions_org", "pending_actions",
                    ["org_id", "status", "created_at", "id"])
    op.create_index("uq_pending_actions_call", "pending_actions", ["turn_id", "tool_use_id"],
                    unique=True, postgresql_where=sa.text("turn_id IS NOT NULL"))


def downgrade() -> None:
    op.drop_table("pending_actions")
    op.execute("UPDATE turns SET status = 'done' WHERE status = 'waiting'")
    op.drop_constraint("ck_turns_status", "turns", type_="check")
    op.create_check_constraint("ck_turns_status", "turns", f"status in {_OLD}")
