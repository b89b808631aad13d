"""Human gates and sub-runs: a workflow run may be `waiting` (a `human` step's gate is open;
its time there does not count against the run's wall clock), and a run may be the child of
a `workflow` step of another run (its parent run and step, its depth).

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import UUID

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_NEW = "('running','paused','waiting','succeeded','failed','cancelled')"
_OLD = "('running','paused','succeeded','failed','cancelled')"


def upgrade() -> None:
    op.drop_constraint("ck_workflow_runs_status", "workflow_runs", type_="check")
    op.create_check_constraint("ck_workflow_runs_status", "workflow_runs", f"status in {_NEW}")
    op.add_column("workflow_runs", sa.Column("parent_run_id", UUID(as_uuid=True),
                                             sa.ForeignKey("workflow_runs.id",
                                                           ondelete="CASCADE"), nullable=True))
    op.add_column("workflow_runs", sa.Column("parent_step_id", UUID(as_uuid=True),
                                             nullable=True))
    op.add_column("workflow_runs", sa.Column("depth", sa.Integer, nullable=False,
                                             server_default="0"))
    op.create_index("ix_workflow_runs_parent", "workflow_runs", ["parent_run_id"],
                    postgresql_where=sa.text("parent_run_id IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_workflow_runs_parent", "workflow_runs")
    for column in ("depth", "parent_step_id", "parent_run_id"):
        op.drop_column("workflow_runs", column)
    op.execute("UPDATE workflow_runs SET status = 'running', paused_at = NULL "
               "WHERE status = 'waiting'")
    op.drop_constraint("ck_workflow_runs_status", "workflow_runs", type_="check")
    op.create_check_constraint("ck_workflow_runs_status", "workflow_runs", f"status in {_OLD}")
