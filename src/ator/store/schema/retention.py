"""Retention tables: usage kept from purged threads and the audit of every purge.

Layer: store; imports sqlalchemy and ator.store.schema.columns only. Part of
`ator.store.schema`, on its one `metadata` (see that package's docstring).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB, UUID

from ator.store.schema.columns import _now, _org, _org_hot, metadata

__all__ = [
    "purges",
    "usage_purged",
]

# Retention (ator.retention, store/retention.py; migration 0022). What a purged thread's
# model calls billed, summed per hour (read beside model_calls by store/usage.py, so a purge
# changes no total), and the audit of every purge: what went, under which cutoff, how many
# rows of each table.
usage_purged = sa.Table(
    "usage_purged",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    _org_hot(),
    sa.Column("thread_id", UUID(as_uuid=True), nullable=False),
    sa.Column("setup_id", UUID(as_uuid=True), nullable=True),
    sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
    sa.Column("calls", sa.BigInteger, nullable=False),
    sa.Column("input_tokens", sa.BigInteger, nullable=False),
    sa.Column("output_tokens", sa.BigInteger, nullable=False),
    sa.Column("cache_read_tokens", sa.BigInteger, nullable=False),
    sa.Column("cache_write_tokens", sa.BigInteger, nullable=False),
    sa.Column("cost_usd", sa.Numeric(18, 6), nullable=False),
    sa.Column("all_priced", sa.Boolean, nullable=False),
    sa.Index("ix_usage_purged_org_hour", "org_id", "hour"),
)


purges = sa.Table(
    "purges",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    _org(),
    sa.Column("what", sa.Text, nullable=False),
    sa.Column("subject_id", UUID(as_uuid=True), nullable=True),
    sa.Column("cutoff", sa.DateTime(timezone=True), nullable=False),
    sa.Column("rows", JSONB, nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.Index("ix_purges_org_at", "org_id", "at", "id"),
)

