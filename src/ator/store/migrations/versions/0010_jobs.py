"""Durable jobs and schedules (ator.jobs): the queue every piece of work beyond a turn runs on.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Hot table: no foreign keys (as turns/events), the org is checked by whoever enqueues.
    op.create_table(
        "jobs",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("payload", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("state", sa.Text, nullable=False, server_default="queued"),
        sa.Column("priority", sa.SmallInteger, nullable=False, server_default="0"),
        sa.Column("run_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.Column("attempt", sa.Integer, nullable=False, server_default="0"),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("lease_owner", sa.Text, nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("unique_key", sa.Text, nullable=True),
        sa.Column("request_id", sa.Text, nullable=True),
        sa.Column("schedule_id", UUID(as_uuid=True), nullable=True),
        sa.Column("tick", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("state in ('queued','running','done','dead')",
                           name="ck_jobs_state"),
    )
    # The claim walks (kind, org) pairs with ready jobs by skip scan, then takes each
    # pair's next jobs in priority order (store/jobs.py).
    op.create_index("ix_jobs_ready", "jobs",
                    ["kind", "org_id", sa.text("priority DESC"), "run_at", "id"],
                    postgresql_where=sa.text("state = 'queued'"))
    op.create_index("ix_jobs_running", "jobs", ["kind", "org_id"],
                    postgresql_where=sa.text("state = 'running'"))
    op.create_index("ix_jobs_lease", "jobs", ["lease_until"],
                    postgresql_where=sa.text("state = 'running'"))
    op.create_index("ix_jobs_finished", "jobs", ["state", "finished_at"],
                    postgresql_where=sa.text("state IN ('done','dead')"))
    op.create_index("uq_jobs_unique", "jobs", ["org_id", "kind", "unique_key"], unique=True,
                    postgresql_where=sa.text(
                        "unique_key IS NOT NULL AND state IN ('queued','running')"))
    op.create_index("uq_jobs_tick", "jobs", ["schedule_id", "tick"], unique=True,
                    postgresql_where=sa.text("schedule_id IS NOT NULL"))

    op.create_table(
        "schedules",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("payload", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("cron", sa.Text, nullable=False),
        sa.Column("zone", sa.Text, nullable=False),
        sa.Column("overlap", sa.Text, nullable=False, server_default="skip"),
        sa.Column("catch_up", sa.Float, nullable=False, server_default="60"),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("next_tick", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_tick", sa.DateTime(timezone=True), nullable=True),
        sa.Column("pending", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.UniqueConstraint("org_id", "name", name="uq_schedules_org_name"),
        sa.CheckConstraint("overlap in ('skip','buffer','allow')", name="ck_schedules_overlap"),
    )
    op.create_index("ix_schedules_due", "schedules", ["next_tick"],
                    postgresql_where=sa.text("enabled"))


def downgrade() -> None:
    op.drop_table("schedules")
    op.drop_table("jobs")
