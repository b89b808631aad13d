"""Single sign-on tables: an org's OIDC client, logins in flight and the grant behind each SSO key.

Layer: store; imports sqlalchemy and ator.store.schema.columns only. Part of
`ator.store.schema`, on its one `metadata` (see that package's docstring).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB, UUID

from ator.store.schema.columns import _created, _now, _org, metadata

__all__ = [
    "sso_configs",
    "sso_grants",
    "sso_logins",
]

# Single sign-on (ator.sso, store/sso.py; migration 0022): an org's OIDC client (its secret
# encrypted under the master key), the logins in flight (state hash, PKCE verifier, nonce;
# used once), and the grant behind each SSO key (the refresh token, encrypted).
sso_configs = sa.Table(
    "sso_configs",
    metadata,
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
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.CheckConstraint("default_role in ('admin','member','viewer')", name="ck_sso_configs_role"),
)


sso_logins = sa.Table(
    "sso_logins",
    metadata,
    sa.Column("state_hash", sa.Text, primary_key=True),
    _org(),
    sa.Column("verifier", sa.Text, nullable=False),
    sa.Column("nonce", sa.Text, nullable=False),
    _created(),
    sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
)


sso_grants = sa.Table(
    "sso_grants",
    metadata,
    sa.Column("key_id", UUID(as_uuid=True), sa.ForeignKey("api_keys.id", ondelete="CASCADE"),
              primary_key=True),
    _org(),
    sa.Column("subject", sa.Text, nullable=False),
    sa.Column("refresh_nonce", sa.LargeBinary, nullable=True),
    sa.Column("refresh_ct", sa.LargeBinary, nullable=True),
    sa.Column("refreshed_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
)

