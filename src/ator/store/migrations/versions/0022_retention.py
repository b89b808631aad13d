"""Run it for years: the money of purged threads (`usage_purged`), the purge audit
(`purges`), an index for consumed mailbox items by age, the trace context carried by jobs
and mailbox items, a thread's voice mode, and single sign-on (an org's OIDC client, logins
in flight, the grants behind SSO sessions).

Revision ID: 0022
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # What a purged thread's model calls billed, summed per hour: usage and caps read it
    # beside model_calls, so a purge never changes a total (store/usage.py).
    op.create_table(
        "usage_purged",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
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
    )
    op.create_index("ix_usage_purged_org_hour", "usage_purged", ["org_id", "hour"])
    op.create_table(
        "purges",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("what", sa.Text, nullable=False),
        sa.Column("subject_id", UUID(as_uuid=True), nullable=True),
        sa.Column("cutoff", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rows", JSONB, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
    )
    op.create_index("ix_purges_org_at", "purges", ["org_id", "at", "id"])
    op.create_index("ix_mailbox_consumed", "mailbox", ["org_id", "created_at"],
                    postgresql_where=sa.text("turn_id IS NOT NULL"))
    op.create_index("ix_threads_trash", "threads", ["org_id", "deleted_at"],
                    postgresql_where=sa.text("deleted_at IS NOT NULL"))
    # W3C traceparent of the request that wrote the row (NULL when tracing is off).
    op.add_column("jobs", sa.Column("traceparent", sa.Text, nullable=True))
    op.add_column("mailbox", sa.Column("traceparent", sa.Text, nullable=True))
    op.add_column("threads", sa.Column("voice", sa.Boolean, nullable=False,
                                       server_default=sa.false()))
    op.create_table(
        "sso_configs",
        sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("issuer", sa.Text, nullable=False),
        sa.Column("client_id", sa.Text, nullable=False),
        sa.Column("secret_nonce", sa.LargeBinary, nullable=True),
        sa.Column("secret_ct", sa.LargeBinary, nullable=True),
        sa.Column("email_domain", sa.Text, nullable=True),
        sa.Column("email_claim", sa.Text, nullable=False, server_default="email"),
        sa.Column("role_claim", sa.Text, nullable=True),
        sa.Column("role_map", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("default_role", sa.Text, nullable=False, server_default="member"),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.CheckConstraint("default_role in ('admin','member','viewer')",
                           name="ck_sso_configs_role"),
    )
    op.create_table(
        "sso_logins",
        sa.Column("state_hash", sa.Text, primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("verifier", sa.Text, nullable=False),
        sa.Column("nonce", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "sso_grants",
        sa.Column("key_id", UUID(as_uuid=True),
                  sa.ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("refresh_nonce", sa.LargeBinary, nullable=True),
        sa.Column("refresh_ct", sa.LargeBinary, nullable=True),
        sa.Column("refreshed_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
    )


def downgrade() -> None:
    op.drop_table("sso_grants")
    op.drop_table("sso_logins")
    op.drop_table("sso_configs")
    op.drop_column("threads", "voice")
    op.drop_column("mailbox", "traceparent")
    op.drop_column("jobs", "traceparent")
    op.drop_index("ix_threads_trash", table_name="threads")
    op.drop_index("ix_mailbox_consumed", table_name="mailbox")
    op.drop_table("purges")
    op.drop_table("usage_purged")
