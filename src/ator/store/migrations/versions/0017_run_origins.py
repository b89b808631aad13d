"""Where a workflow run came from: the schedule tick that fired it, or the conversation (and
tool call) that started it, which is told its result once when it ends. And a NOTIFY on
`ator_run_events` for every run event written, whichever writer writes it (a trigger: no
code path can forget it; NOTIFY is sent at commit, and a transaction's notices of one run
are folded into one by PostgreSQL), so live readers of a run (the `run:` socket room) read
what was committed instead of polling.

Revision ID: 0017
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_origins",
        sa.Column("run_id", UUID(as_uuid=True),
                  sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("schedule_id", UUID(as_uuid=True),
                  sa.ForeignKey("schedules.id", ondelete="SET NULL"), nullable=True),
        sa.Column("tick", sa.DateTime(timezone=True), nullable=True),
        sa.Column("thread_id", UUID(as_uuid=True),
                  sa.ForeignKey("threads.id", ondelete="SET NULL"), nullable=True),
        sa.Column("tool_use_id", sa.Text, nullable=True),
        sa.Column("budget", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
    )
    op.create_index("ix_run_origins_schedule", "run_origins", ["schedule_id"],
                    postgresql_where=sa.text("schedule_id IS NOT NULL"))
    op.create_index("ix_run_origins_thread", "run_origins", ["thread_id"],
                    postgresql_where=sa.text("thread_id IS NOT NULL"))
    # One run per (thread, tool call): a retried start_workflow finds the run it made.
    op.create_index("uq_run_origins_call", "run_origins", ["thread_id", "tool_use_id"],
                    unique=True, postgresql_where=sa.text("tool_use_id IS NOT NULL"))
    op.execute("""
        CREATE FUNCTION ator_run_event_notify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          PERFORM pg_notify('ator_run_events', NEW.run_id::text);
          RETURN NULL;
        END $$""")
    op.execute("""
        CREATE TRIGGER workflow_events_notify AFTER INSERT ON workflow_events
          FOR EACH ROW EXECUTE FUNCTION ator_run_event_notify()""")


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS workflow_events_notify ON workflow_events")
    op.execute("DROP FUNCTION IF EXISTS ator_run_event_notify()")
    op.drop_table("run_origins")
