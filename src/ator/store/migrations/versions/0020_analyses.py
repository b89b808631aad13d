"""Analyses: model work without a turn (its budget reservations; model calls with no
thread), org analysis kinds, stored analyses, per-day figures per kind, eval runs.

Revision ID: 0020
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def _created() -> sa.Column[object]:
    return sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                     server_default=sa.text("now()"))


def upgrade() -> None:
    # A model call outside a turn holds its worst case here until it settles; one whose
    # worker died is given back by the reaper's sweep once `expires_at` passed.
    op.create_table(
        "work_reservations",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("label", sa.Text, nullable=False),
        sa.Column("amount", sa.Numeric(14, 6), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        _created(),
    )
    op.create_index("ix_work_reservations_expires", "work_reservations", ["expires_at"])
    # A call outside a turn has no thread or turn; its `purpose` is its label.
    op.alter_column("model_calls", "thread_id", nullable=True)
    op.alter_column("model_calls", "turn_id", nullable=True)

    op.create_table(
        "analysis_kinds",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("spec", JSONB, nullable=False),
        _created(),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.UniqueConstraint("org_id", "name", name="uq_analysis_kinds_org_name"),
    )
    op.create_table(
        "analyses",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("kind_version", sa.Integer, nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("input_hash", sa.Text, nullable=False),
        sa.Column("cacheable", sa.Boolean, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("output", JSONB, nullable=False),
        sa.Column("verdict", sa.Text, nullable=False),
        sa.Column("problems", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
        sa.Column("cost_usd", sa.Numeric(14, 6), nullable=False, server_default="0"),
        sa.Column("spent_usd", sa.Numeric(14, 6), nullable=False, server_default="0"),
        sa.Column("origin", sa.Text, nullable=False),
        sa.Column("request_id", sa.Text, nullable=True),
        _created(),
    )
    op.create_index("ix_analyses_cache", "analyses", ["org_id", "kind", "target", "input_hash"],
                    postgresql_where=sa.text("cacheable"))
    op.create_index("ix_analyses_org_kind", "analyses", ["org_id", "kind", "created_at"])
    op.create_table(
        "analysis_daily",
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("day", sa.Date, nullable=False),
        # Spread over 16 rows per (org, kind, day): every run adds to one, so concurrent
        # runs of one kind do not queue on a single row's lock.
        sa.Column("shard", sa.SmallInteger, nullable=False, server_default="0"),
        sa.Column("runs", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("model_calls", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("cache_hits", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("fallbacks", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("cost_usd", sa.Numeric(14, 6), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("org_id", "kind", "day", "shard", name="pk_analysis_daily"),
    )
    op.create_table(
        "eval_runs",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), nullable=True),  # NULL: a kind in code
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("kind_version", sa.Integer, nullable=False),
        sa.Column("setup", sa.Text, nullable=False),
        sa.Column("cases", sa.Integer, nullable=False),
        sa.Column("passed", sa.Integer, nullable=False),
        sa.Column("results", JSONB, nullable=False),
        _created(),
    )
    op.create_index("ix_eval_runs_kind", "eval_runs", ["kind", "created_at"])


def downgrade() -> None:
    op.drop_table("eval_runs")
    op.drop_table("analysis_daily")
    op.drop_table("analyses")
    op.drop_table("analysis_kinds")
    op.execute("DELETE FROM model_calls WHERE thread_id IS NULL OR turn_id IS NULL")
    op.alter_column("model_calls", "turn_id", nullable=False)
    op.alter_column("model_calls", "thread_id", nullable=False)
    op.drop_table("work_reservations")
