"""Workflows: recipes and their immutable versions, runs pinned to one, their steps, step
attempts (unique per step and attempt) and an append-only event log with a per-run seq.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_NOW = sa.text("now()")


def _org() -> sa.Column[object]:
    return sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                     nullable=False)


def upgrade() -> None:
    op.create_table(
        "workflows",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        _org(),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("latest_version", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
        sa.UniqueConstraint("org_id", "name", name="uq_workflows_org_name"),
    )
    op.create_table(
        "workflow_versions",
        sa.Column("workflow_id", UUID(as_uuid=True),
                  sa.ForeignKey("workflows.id", ondelete="CASCADE"), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        _org(),
        sa.Column("recipe", JSONB, nullable=False),
        sa.Column("sha256", sa.Text, nullable=False),
        sa.Column("published_by", UUID(as_uuid=True), nullable=True),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=_NOW),
        sa.PrimaryKeyConstraint("workflow_id", "version"),
    )
    op.create_table(
        "workflow_runs",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        _org(),
        sa.Column("workflow_id", UUID(as_uuid=True),
                  sa.ForeignKey("workflows.id", ondelete="CASCADE"), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("recipe", JSONB, nullable=False),  # pinned: never re-read from a version
        sa.Column("input", JSONB, nullable=False),
        sa.Column("idempotency_key", sa.Text, nullable=True),
        sa.Column("status", sa.Text, nullable=False, server_default="running"),
        sa.Column("output", JSONB, nullable=True),
        sa.Column("fail_reason", sa.Text, nullable=True),
        sa.Column("pause_reason", sa.Text, nullable=True),
        sa.Column("cancel_reason", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("max_steps", sa.Integer, nullable=False),
        sa.Column("steps_used", sa.Integer, nullable=False, server_default="0"),
        sa.Column("wall_clock_s", sa.Float, nullable=False),
        sa.Column("deadline", sa.DateTime(timezone=True), nullable=False),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("changes", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("event_seq", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("lease_owner", sa.Text, nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_by", UUID(as_uuid=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status in ('running','paused','succeeded','failed','cancelled')",
            name="ck_workflow_runs_status"),
    )
    op.create_index("uq_workflow_runs_key", "workflow_runs", ["org_id", "idempotency_key"],
                    unique=True, postgresql_where=sa.text("idempotency_key IS NOT NULL"))
    op.create_index("ix_workflow_runs_org_created", "workflow_runs",
                    ["org_id", "created_at", "id"])
    op.create_table(
        "workflow_steps",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("run_id", UUID(as_uuid=True),
                  sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), nullable=False),
        _org(),
        sa.Column("parent_id", UUID(as_uuid=True), nullable=True),
        sa.Column("path", sa.Text, nullable=False),  # "fetch", "each/17", "pick/0"
        sa.Column("position", sa.Integer, nullable=False),  # order among its siblings
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("spec", JSONB, nullable=False),
        sa.Column("input", JSONB, nullable=True),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False, server_default="0"),
        sa.Column("output", JSONB, nullable=True),
        sa.Column("output_size", sa.Integer, nullable=True),
        sa.Column("preview", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("wake_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("run_id", "path", name="uq_workflow_steps_path"),
        sa.CheckConstraint(
            "status in ('pending','queued','running','waiting','done','failed','skipped',"
            "'cancelled')", name="ck_workflow_steps_status"),
    )
    op.create_index("ix_workflow_steps_parent", "workflow_steps",
                    ["parent_id", "status", "position"])
    op.create_table(
        "workflow_attempts",
        sa.Column("step_id", UUID(as_uuid=True),
                  sa.ForeignKey("workflow_steps.id", ondelete="CASCADE"), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("job_id", sa.BigInteger, nullable=False),
        sa.Column("outcome", sa.Text, nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("step_id", "attempt"),
    )
    op.create_table(
        "workflow_events",
        sa.Column("run_id", UUID(as_uuid=True),
                  sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("data", JSONB, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
        sa.PrimaryKeyConstraint("run_id", "seq"),
    )


def downgrade() -> None:
    for table in ("workflow_events", "workflow_attempts", "workflow_steps", "workflow_runs",
                  "workflow_versions", "workflows"):
        op.drop_table(table)
