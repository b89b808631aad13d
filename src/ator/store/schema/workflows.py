"""Workflow tables: recipes, their versions, runs, steps, each agent step's hidden thread,
attempts, run events, and where a run came from.

Layer: store; imports sqlalchemy and ator.store.schema.columns only. Part of
`ator.store.schema`, on its one `metadata` (see that package's docstring).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB, UUID

from ator.store.schema.columns import _created, _id, _now, _org, metadata

__all__ = [
    "run_origins",
    "workflow_attempts",
    "workflow_events",
    "workflow_holds",
    "workflow_runs",
    "workflow_steps",
    "workflow_threads",
    "workflow_versions",
    "workflows",
]

# Workflows (ator.workflows; store/workflows.py, migration 0012). A run pins its recipe; its
# steps are unique per (run, path); attempts are unique per (step, attempt); its events
# carry a per-run seq taken from `workflow_runs.event_seq`.
workflows = sa.Table(
    "workflows",
    metadata,
    _id(),
    _org(),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("latest_version", sa.Integer, nullable=False, server_default="0"),
    _created(),
    sa.UniqueConstraint("org_id", "name", name="uq_workflows_org_name"),
)


workflow_versions = sa.Table(
    "workflow_versions",
    metadata,
    sa.Column("workflow_id", UUID(as_uuid=True),
              sa.ForeignKey("workflows.id", ondelete="CASCADE"), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    _org(),
    sa.Column("recipe", JSONB, nullable=False),
    sa.Column("sha256", sa.Text, nullable=False),
    sa.Column("published_by", UUID(as_uuid=True), nullable=True),
    sa.Column("published_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.PrimaryKeyConstraint("workflow_id", "version"),
)


workflow_runs = sa.Table(
    "workflow_runs",
    metadata,
    _id(),
    _org(),
    sa.Column("workflow_id", UUID(as_uuid=True),
              sa.ForeignKey("workflows.id", ondelete="CASCADE"), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("recipe", JSONB, nullable=False),
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
    _created(),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    # migration 0015: the usd budget and what the run's agent steps spent; the no-progress
    # clock (idle_s from the last progress)
    sa.Column("usd_budget", sa.Numeric(18, 6), nullable=True),
    sa.Column("spent_usd", sa.Numeric(18, 6), nullable=False, server_default="0"),
    sa.Column("idle_s", sa.Float, nullable=True),
    sa.Column("progress_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    # migration 0023: a sub-run's parent run and step, and its depth; `waiting` while a
    # `human` step's gate is open (paused_at: since when)
    sa.Column("parent_run_id", UUID(as_uuid=True),
              sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), nullable=True),
    sa.Column("parent_step_id", UUID(as_uuid=True), nullable=True),
    sa.Column("depth", sa.Integer, nullable=False, server_default="0"),
    sa.CheckConstraint(
        "status in ('running','paused','waiting','succeeded','failed','cancelled')",
        name="ck_workflow_runs_status"),
    sa.Index("uq_workflow_runs_key", "org_id", "idempotency_key", unique=True,
             postgresql_where=sa.text("idempotency_key IS NOT NULL")),
    sa.Index("ix_workflow_runs_org_created", "org_id", "created_at", "id"),
    sa.Index("ix_workflow_runs_parent", "parent_run_id",
             postgresql_where=sa.text("parent_run_id IS NOT NULL")),
)


workflow_steps = sa.Table(
    "workflow_steps",
    metadata,
    _id(),
    sa.Column("run_id", UUID(as_uuid=True),
              sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), nullable=False),
    _org(),
    sa.Column("parent_id", UUID(as_uuid=True), nullable=True),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("position", sa.Integer, nullable=False),
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
    _created(),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    # migration 0015: an agent step's usage and cost, a failed step's typed code
    sa.Column("usage", JSONB, nullable=True),
    sa.Column("cost_usd", sa.Numeric(18, 6), nullable=False, server_default="0"),
    sa.Column("error_code", sa.Text, nullable=True),
    sa.UniqueConstraint("run_id", "path", name="uq_workflow_steps_path"),
    sa.CheckConstraint(
        "status in ('pending','queued','running','waiting','done','failed','skipped',"
        "'cancelled')", name="ck_workflow_steps_status"),
    sa.Index("ix_workflow_steps_parent", "parent_id", "status", "position"),
)


# The hidden thread of each agent step (store/workflow_threads.py): one per step, whatever
# its attempts; a run's spend is its threads' turns' spend.
workflow_threads = sa.Table(
    "workflow_threads",
    metadata,
    sa.Column("step_id", UUID(as_uuid=True),
              sa.ForeignKey("workflow_steps.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("run_id", UUID(as_uuid=True),
              sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("org_id", UUID(as_uuid=True), nullable=False),
    sa.Column("thread_id", UUID(as_uuid=True),
              sa.ForeignKey("threads.id", ondelete="CASCADE"), nullable=False),
    sa.UniqueConstraint("thread_id", name="uq_workflow_threads_thread"),
    sa.Index("ix_workflow_threads_run", "run_id"),
)


# What each agent step's turn holds of its run's usd budget for the model call it is
# making (store/workflow_threads.py `hold`, migration 0024): one row per turn, replaced at
# each call, counted only while the turn runs and has not recorded the call (its cost is
# still `cost_at`), so a settled, ended or lost turn holds nothing without a sweep.
workflow_holds = sa.Table(
    "workflow_holds",
    metadata,
    sa.Column("turn_id", UUID(as_uuid=True),
              sa.ForeignKey("turns.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("run_id", UUID(as_uuid=True),
              sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("org_id", UUID(as_uuid=True), nullable=False),
    sa.Column("amount_usd", sa.Numeric(14, 6), nullable=False),
    sa.Column("cost_at", sa.Numeric(14, 6), nullable=False),
    sa.Index("ix_workflow_holds_run", "run_id"),
)

workflow_attempts = sa.Table(
    "workflow_attempts",
    metadata,
    sa.Column("step_id", UUID(as_uuid=True),
              sa.ForeignKey("workflow_steps.id", ondelete="CASCADE"), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("org_id", UUID(as_uuid=True), nullable=False),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("outcome", sa.Text, nullable=True),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint("step_id", "attempt"),
)


workflow_events = sa.Table(
    "workflow_events",
    metadata,
    sa.Column("run_id", UUID(as_uuid=True),
              sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("org_id", UUID(as_uuid=True), nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("data", JSONB, nullable=False),
    _created(),
    sa.PrimaryKeyConstraint("run_id", "seq"),
)


# Where a run came from (store/run_origins.py): a schedule's tick, or a conversation's tool
# call, which is told the run's result once when it ends.
run_origins = sa.Table(
    "run_origins",
    metadata,
    sa.Column("run_id", UUID(as_uuid=True),
              sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), primary_key=True),
    _org(),
    sa.Column("schedule_id", UUID(as_uuid=True),
              sa.ForeignKey("schedules.id", ondelete="SET NULL"), nullable=True),
    sa.Column("tick", sa.DateTime(timezone=True), nullable=True),
    sa.Column("thread_id", UUID(as_uuid=True),
              sa.ForeignKey("threads.id", ondelete="SET NULL"), nullable=True),
    sa.Column("tool_use_id", sa.Text, nullable=True),
    sa.Column("budget", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    _created(),
    sa.Index("ix_run_origins_schedule", "schedule_id",
             postgresql_where=sa.text("schedule_id IS NOT NULL")),
    sa.Index("ix_run_origins_thread", "thread_id",
             postgresql_where=sa.text("thread_id IS NOT NULL")),
    sa.Index("uq_run_origins_call", "thread_id", "tool_use_id", unique=True,
             postgresql_where=sa.text("tool_use_id IS NOT NULL")),
)

