"""Turn statuses a client can trust (done only when the model finished), and model calls
that say when their usage is an estimate.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_NEW = "('running','done','capped','budget','refused','stopped','lost','error')"
_OLD = "('running','done','cancelled','error')"


def upgrade() -> None:
    op.drop_constraint("ck_turns_status", "turns", type_="check")
    # Rows written before this revision get the status their stop reason now maps to.
    op.execute("""
        UPDATE turns SET status = CASE
            WHEN stop_reason IN ('max_steps','token_cap','timeout','stalled','max_tokens')
                THEN 'capped'
            WHEN stop_reason = 'budget' THEN 'budget'
            WHEN stop_reason = 'refusal' THEN 'refused'
            WHEN stop_reason LIKE 'cancelled:%' THEN 'stopped'
            WHEN stop_reason = 'error:lost' THEN 'lost'
            ELSE status END
         WHERE status <> 'running'
    """)
    op.create_check_constraint("ck_turns_status", "turns", f"status in {_NEW}")
    op.add_column("model_calls", sa.Column("usage_estimated", sa.Boolean(), nullable=False,
                                           server_default=sa.false()))


def downgrade() -> None:
    op.drop_column("model_calls", "usage_estimated")
    op.drop_constraint("ck_turns_status", "turns", type_="check")
    op.execute("""
        UPDATE turns SET status = CASE
            WHEN status IN ('capped','budget','refused') THEN 'done'
            WHEN status = 'stopped' THEN 'cancelled'
            WHEN status = 'lost' THEN 'error'
            ELSE status END
    """)
    op.create_check_constraint("ck_turns_status", "turns", f"status in {_OLD}")
