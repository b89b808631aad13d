"""Workflows, second slice: agent steps' threads and spend, a run's usd budget and its
no-progress clock, and a typed code on a failed step.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workflow_steps", sa.Column("usage", JSONB, nullable=True))
    op.add_column("workflow_steps", sa.Column("cost_usd", sa.Numeric(18, 6), nullable=False,
                                              server_default="0"))
    op.add_column("workflow_steps", sa.Column("error_code", sa.Text, nullable=True))
    op.add_column("workflow_runs", sa.Column("usd_budget", sa.Numeric(18, 6), nullable=True))
    op.add_column("workflow_runs", sa.Column("spent_usd", sa.Numeric(18, 6), nullable=False,
                                             server_default="0"))
    op.add_column("workflow_runs", sa.Column("idle_s", sa.Float, nullable=True))
    op.add_column("workflow_runs", sa.Column("progress_at", sa.DateTime(timezone=True),
                                             nullable=False, server_default=sa.text("now()")))
    # The hidden thread of each agent step (one per step, whatever its attempts): the turn
    # of a retried attempt is the same turn, and a run's spend is its threads' turns' spend.
    op.create_table(
        "workflow_threads",
        sa.Column("step_id", UUID(as_uuid=True),
                  sa.ForeignKey("workflow_steps.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("run_id", UUID(as_uuid=True),
                  sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("thread_id", UUID(as_uuid=True),
                  sa.ForeignKey("threads.id", ondelete="CASCADE"), nullable=False),
        sa.UniqueConstraint("thread_id", name="uq_workflow_threads_thread"),
    )
    op.create_index("ix_workflow_threads_run", "workflow_threads", ["run_id"])


def downgrade() -> None:
    op.drop_table("workflow_threads")
    for column in ("progress_at", "idle_s", "spent_usd", "usd_budget"):
        op.drop_column("workflow_runs", column)
    for column in ("error_code", "cost_usd", "usage"):
        op.drop_column("workflow_steps", column)
