"""What each agent step's turn holds of its workflow run's usd budget for the call it is
making, so concurrent agent steps of one run reserve against the budget instead of each
checking the settled spend alone (store/workflow_threads.py `hold`).

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import UUID

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workflow_holds",
        sa.Column("turn_id", UUID(as_uuid=True),
                  sa.ForeignKey("turns.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("run_id", UUID(as_uuid=True),
                  sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("amount_usd", sa.Numeric(14, 6), nullable=False),
        sa.Column("cost_at", sa.Numeric(14, 6), nullable=False),
    )
    op.create_index("ix_workflow_holds_run", "workflow_holds", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_workflow_holds_run", "workflow_holds")
    op.drop_table("workflow_holds")
