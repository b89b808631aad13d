"""The tool audit table: one row per tool call made outside a turn (MCP gateway, workflow step).

Layer: store; imports sqlalchemy and ator.store.schema.columns only. Part of
`ator.store.schema`, on its one `metadata` (see that package's docstring).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import UUID

from ator.store.schema.columns import _created, _id, _org, metadata

__all__ = [
    "tool_audit",
]

# One row per tool call made outside a turn (the MCP gateway, a workflow step): who, which
# tool, a hash of the arguments (never the arguments), how long, how much, how it ended.
tool_audit = sa.Table(
    "tool_audit",
    metadata,
    _id(),
    _org(),
    sa.Column("principal_kind", sa.Text, nullable=False),
    sa.Column("principal_id", UUID(as_uuid=True), nullable=False),
    sa.Column("tool", sa.Text, nullable=False),
    sa.Column("args_sha256", sa.Text, nullable=False),
    sa.Column("duration_ms", sa.Integer, nullable=False),
    sa.Column("result_chars", sa.Integer, nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("error_code", sa.Text, nullable=True),
    _created(),
    sa.Index("ix_tool_audit_org_created", "org_id", "created_at", "id"),
    sa.CheckConstraint("principal_kind in ('user','key')", name="ck_tool_audit_principal"),
    sa.CheckConstraint("outcome in ('ok','error')", name="ck_tool_audit_outcome"),
)

