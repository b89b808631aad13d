"""Analysis tables: an org's kinds, stored analyses, per-day figures and eval runs.

Layer: store; imports sqlalchemy and ator.store.schema.columns only. Part of
`ator.store.schema`, on its one `metadata` (see that package's docstring).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB, UUID

from ator.store.schema.columns import _created, _id, _now, _org, _org_hot, metadata

__all__ = [
    "analyses",
    "analysis_daily",
    "analysis_kinds",
    "eval_runs",
]

# Analyses (ator.analyses, store/analyses.py): an org's kinds as data, every stored analysis
# (the cache is (org, kind, target, input_hash) among the cacheable ones), per-day figures
# per (org, kind), eval runs (org NULL for a kind defined in code).
analysis_kinds = sa.Table(
    "analysis_kinds",
    metadata,
    _id(),
    _org(),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("spec", JSONB, nullable=False),
    _created(),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.UniqueConstraint("org_id", "name", name="uq_analysis_kinds_org_name"),
)


analyses = sa.Table(
    "analyses",
    metadata,
    _id(),
    _org_hot(),
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
    sa.Index("ix_analyses_cache", "org_id", "kind", "target", "input_hash",
             postgresql_where=sa.text("cacheable")),
    sa.Index("ix_analyses_org_kind", "org_id", "kind", "created_at"),
)


analysis_daily = sa.Table(
    "analysis_daily",
    metadata,
    sa.Column("org_id", UUID(as_uuid=True), nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("day", sa.Date, nullable=False),
    sa.Column("shard", sa.SmallInteger, nullable=False, server_default="0"),
    sa.Column("runs", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("model_calls", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cache_hits", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("fallbacks", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cost_usd", sa.Numeric(14, 6), nullable=False, server_default="0"),
    sa.PrimaryKeyConstraint("org_id", "kind", "day", "shard", name="pk_analysis_daily"),
)


eval_runs = sa.Table(
    "eval_runs",
    metadata,
    _id(),
    sa.Column("org_id", UUID(as_uuid=True), nullable=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("kind_version", sa.Integer, nullable=False),
    sa.Column("setup", sa.Text, nullable=False),
    sa.Column("cases", sa.Integer, nullable=False),
    sa.Column("passed", sa.Integer, nullable=False),
    sa.Column("results", JSONB, nullable=False),
    _created(),
    sa.Index("ix_eval_runs_kind", "kind", "created_at"),
)

