"""Schedule tables: cron schedules as rows.

Layer: store; imports sqlalchemy and ator.store.schema.columns only. Part of
`ator.store.schema`, on its one `metadata` (see that package's docstring).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from ator.store.schema.columns import _created, _id, _org, metadata

__all__ = [
    "schedules",
]

# Schedules as rows (store/schedules.py): cron in an IANA zone; `next_tick` is the next due
# instant (UTC), advanced in the transaction that enqueues its job, so a tick fires once
# across replicas. `pending` is the tick buffered behind a firing still active (overlap
# "buffer").
schedules = sa.Table(
    "schedules",
    metadata,
    _id(),
    _org(),
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
    _created(),
    sa.UniqueConstraint("org_id", "name", name="uq_schedules_org_name"),
    sa.CheckConstraint("overlap in ('skip','buffer','allow')", name="ck_schedules_overlap"),
    sa.Index("ix_schedules_due", "next_tick", postgresql_where=sa.text("enabled")),
)

