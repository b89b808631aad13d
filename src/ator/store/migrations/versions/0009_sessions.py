"""Console sessions: an API key exchanged for a cookie, stored hashed, expiring, revocable.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import UUID

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                  nullable=False),
        # org, user and role come from the key at each lookup: revoking the key ends it
        sa.Column("key_id", UUID(as_uuid=True),
                  sa.ForeignKey("api_keys.id", ondelete="CASCADE"), nullable=False),
        sa.Column("hash", sa.Text, nullable=False, unique=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
    )
    op.create_index("ix_sessions_key", "sessions", ["key_id"])


def downgrade() -> None:
    op.drop_table("sessions")
