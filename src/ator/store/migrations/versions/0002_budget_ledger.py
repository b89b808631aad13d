"""money: the operator's budget ceiling per org and the reservation ledger

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 09:30:00

- orgs.budget_ceiling_usd: the operator's monthly ceiling; the org's own
  monthly_budget_usd may only be at or below it.
- org_usage.reserved_usd: worst cases of the model calls in flight this month.
- turns.reserved_usd: what one turn holds in that ledger, so a lost turn's reservation
  can be released (partial index: only turns holding one are indexed).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("orgs", sa.Column("budget_ceiling_usd", sa.Numeric(14, 6), nullable=True))
    op.add_column(
        "org_usage",
        sa.Column("reserved_usd", sa.Numeric(14, 6), nullable=False, server_default="0"),
    )
    op.add_column(
        "turns",
        sa.Column("reserved_usd", sa.Numeric(14, 6), nullable=False, server_default="0"),
    )
    op.create_index(
        "ix_turns_reserved",
        "turns",
        ["status"],
        unique=False,
        postgresql_where=sa.text("reserved_usd > 0"),
    )


def downgrade() -> None:
    op.drop_index("ix_turns_reserved", table_name="turns")
    op.drop_column("turns", "reserved_usd")
    op.drop_column("org_usage", "reserved_usd")
    op.drop_column("orgs", "budget_ceiling_usd")
