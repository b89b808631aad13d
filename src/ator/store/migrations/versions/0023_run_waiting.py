"""Human gates: a workflow run may be `waiting` (a `human` step's gate is open; its time
there does not count against the run's wall clock).

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_NEW = "('running','paused','waiting','succeeded','failed','cancelled')"
_OLD = "('running','paused','succeeded','failed','cancelled')"


def upgrade() -> None:
    op.drop_constraint("ck_workflow_runs_status", "workflow_runs", type_="check")
    op.create_check_constraint("ck_workflow_runs_status", "workflow_runs", f"status in {_NEW}")


def downgrade() -> None:
    op.execute("UPDATE workflow_runs SET status = 'running', paused_at = NULL "
               "WHERE status = 'waiting'")
    op.drop_constraint("ck_workflow_runs_status", "workflow_runs", type_="check")
    op.create_check_constraint("ck_workflow_runs_status", "workflow_runs", f"status in {_OLD}")
