"""The one MetaData every table is defined on, and the columns most tables repeat.

Layer: store; imports sqlalchemy only. The helpers keep their leading underscore so a table
reads the same wherever it lives; they are for the modules of `ator.store.schema` only.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import UUID

__all__ = ["_created", "_id", "_now", "_org", "_org_hot", "metadata"]

metadata = sa.MetaData()

_now = sa.text("now()")


def _id() -> sa.Column[object]:
    return sa.Column("id", UUID(as_uuid=True), primary_key=True)


def _org() -> sa.Column[object]:
    return sa.Column(
        "org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False
    )


def _org_hot() -> sa.Column[object]:
    """org_id on the per-turn tables, without a foreign key (see the package docstring)."""
    return sa.Column("org_id", UUID(as_uuid=True), nullable=False)


def _created() -> sa.Column[object]:
    return sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now)
