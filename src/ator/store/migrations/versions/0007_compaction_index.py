"""Compaction: find a thread's latest `compaction` event without scanning its log, so a turn's
start reads history from the latest summary on.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX ix_events_compaction ON events (thread_id, seq) "
               "WHERE kind = 'compaction'")


def downgrade() -> None:
    op.execute("DROP INDEX ix_events_compaction")
