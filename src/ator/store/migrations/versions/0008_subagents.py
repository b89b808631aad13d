"""subagents: the delegation contract, idempotent spawns and exactly-once results

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30 11:55:00

- threads.alias: a short name the parent's model uses for a child.
- threads.spawned_by: the parent's tool-use id that created the child; unique per parent,
  so a retried spawn step finds the child it already made instead of making another.
- threads.contract: the delegation contract (task, deliverable, boundaries, tools, budget,
  write_scope) and the tree caps in force when the child was spawned.
- (No "notified" column: the child's one result row in the parent's mailbox, unique per
  (parent, `subagent:<child id>`), is the claim; see store/tree.py.)
- threads.cancelled_at: the subtree was stopped; its results are dropped.
- ix_threads_root: the tree of a root (caps, tree view, cascade).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("threads", sa.Column("alias", sa.Text, nullable=True))
    op.add_column("threads", sa.Column("spawned_by", sa.Text, nullable=True))
    op.add_column("threads", sa.Column("contract", JSONB, nullable=True))
    op.add_column("threads", sa.Column("cancelled_at", sa.DateTime(timezone=True),
                                       nullable=True))
    op.create_index("uq_threads_spawned_by", "threads", ["parent_id", "spawned_by"],
                    unique=True, postgresql_where=sa.text("spawned_by IS NOT NULL"))
    op.create_index("ix_threads_root", "threads", ["root_id"],
                    postgresql_where=sa.text("parent_id IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_threads_root", table_name="threads")
    op.drop_index("uq_threads_spawned_by", table_name="threads")
    for column in ("cancelled_at", "contract", "spawned_by", "alias"):
        op.drop_column("threads", column)
