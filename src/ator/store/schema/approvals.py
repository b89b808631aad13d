"""Pending-action tables: what a person decides once (held tool calls, workflow gates).

Layer: store; imports sqlalchemy and ator.store.schema.columns only. Part of
`ator.store.schema`, on its one `metadata` (see that package's docstring).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB, UUID

from ator.store.schema.columns import _created, _id, _org, metadata

__all__ = [
    "pending_actions",
]

# Pending actions (store/approvals.py): what a person decides once — a held tool call
# (`kind='tool'`, its turn and tool_use id; no turn when held outside one), later a workflow
# gate. The row is also the decision's audit: who, when, the arguments before and after.
pending_actions = sa.Table(
    "pending_actions",
    metadata,
    _id(),
    _org(),
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
    _created(),
    sa.CheckConstraint("status in ('pending','approved','denied','expired')",
                       name="ck_pending_actions_status"),
    sa.Index("ix_pending_actions_org", "org_id", "status", "created_at", "id"),
    sa.Index("uq_pending_actions_call", "turn_id", "tool_use_id", unique=True,
             postgresql_where=sa.text("turn_id IS NOT NULL")),
)

