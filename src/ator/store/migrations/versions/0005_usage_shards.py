"""The org's month usage in shards, so billed writes of one org do not queue on one row.

Shard 0 is the budget row: it holds every reservation (`reserved_usd`) and the spend of calls
that reserved (orgs with a limit). Calls of orgs without a limit add their spend to one of
the other shards, picked by turn, so thousands of concurrent turns of one org update
different rows. The month's spend is the sum over the shards.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("org_usage", sa.Column("shard", sa.SmallInteger(), nullable=False,
                                         server_default="0"))
    op.drop_constraint("pk_org_usage", "org_usage", type_="primary")
    op.create_primary_key("pk_org_usage", "org_usage", ["org_id", "month", "shard"])


def downgrade() -> None:
    # Fold the other shards into the budget row before the key loses its shard.
    op.execute("""
        INSERT INTO org_usage (org_id, month, shard, cost_usd, tokens)
        SELECT org_id, month, 0, sum(cost_usd), sum(tokens) FROM org_usage
         WHERE shard <> 0 GROUP BY org_id, month
        ON CONFLICT (org_id, month, shard) DO UPDATE
           SET cost_usd = org_usage.cost_usd + EXCLUDED.cost_usd,
               tokens = org_usage.tokens + EXCLUDED.tokens
    """)
    op.execute("DELETE FROM org_usage WHERE shard <> 0")
    op.drop_constraint("pk_org_usage", "org_usage", type_="primary")
    op.drop_column("org_usage", "shard")
    op.create_primary_key("pk_org_usage", "org_usage", ["org_id", "month"])
