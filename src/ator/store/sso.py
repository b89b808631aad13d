"""Single sign-on's rows (layer: store; imports sqlalchemy, ator.store.*).

An org's OIDC client (`sso_configs`), the logins in flight (`sso_logins`: the hash of the
state, the PKCE verifier and the nonce; consumed once, by the statement that reads it, so a
replayed state finds nothing), and the grant behind each key an SSO login minted
(`sso_grants`: the subject and the refresh token, both written by the sso service).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ator.store.database import Database, first
from ator.store.scope import Scope

__all__ = ["Grant", "SsoConfig", "consume_login", "get_config", "grant_of", "put_config",
           "put_grant", "start_login", "touch_grant"]


@dataclass(frozen=True, slots=True)
class SsoConfig:
    org_id: UUID
    issuer: str
    client_id: str
    secret_nonce: bytes | None
    secret_ct: bytes | None
    email_domain: str | None
    email_claim: str
    role_claim: str | None
    role_map: dict[str, str]
    default_role: str


@dataclass(frozen=True, slots=True)
class Grant:
    key_id: UUID
    org_id: UUID
    subject: str
    refresh_nonce: bytes | None
    refresh_ct: bytes | None


_GET = sa.text("""
SELECT org_id, issuer, client_id, secret_nonce, secret_ct, email_domain, email_claim,
       role_claim, role_map, default_role FROM sso_configs WHERE org_id = :org_id
""")

_PUT = sa.text("""
INSERT INTO sso_configs (org_id, issuer, client_id, secret_nonce, secret_ct, email_domain,
                         email_claim, role_claim, role_map, default_role)
VALUES (:org_id, :issuer, :client_id, :secret_nonce, :secret_ct, :email_domain, :email_claim,
        :role_claim, CAST(:role_map AS jsonb), :default_role)
ON CONFLICT (org_id) DO UPDATE SET
  issuer = EXCLUDED.issuer, client_id = EXCLUDED.client_id,
  secret_nonce = EXCLUDED.secret_nonce, secret_ct = EXCLUDED.secret_ct,
  email_domain = EXCLUDED.email_domain, email_claim = EXCLUDED.email_claim,
  role_claim = EXCLUDED.role_claim, role_map = EXCLUDED.role_map,
  default_role = EXCLUDED.default_role, updated_at = now()
""")

# A login row also clears the org's rows older than a day (bounded by a day's logins).
_START = sa.text("""
WITH gone AS (DELETE FROM sso_logins
               WHERE org_id = :org_id AND created_at < now() - interval '1 day')
INSERT INTO sso_logins (state_hash, org_id, verifier, nonce)
VALUES (:state_hash, :org_id, :verifier, :nonce)
""")

_CONSUME = sa.text("""
UPDATE sso_logins SET used_at = now()
 WHERE state_hash = :state_hash AND used_at IS NULL
   AND created_at > now() - make_interval(secs => :ttl)
RETURNING org_id, verifier, nonce
""")

_PUT_GRANT = sa.text("""
INSERT INTO sso_grants (key_id, org_id, subject, refresh_nonce, refresh_ct)
VALUES (:key_id, :org_id, :subject, :refresh_nonce, :refresh_ct)
ON CONFLICT (key_id) DO UPDATE SET subject = EXCLUDED.subject,
  refresh_nonce = EXCLUDED.refresh_nonce, refresh_ct = EXCLUDED.refresh_ct,
  refreshed_at = now()
""")

_GRANT = sa.text("""
SELECT key_id, org_id, subject, refresh_nonce, refresh_ct FROM sso_grants
 WHERE key_id = :key_id
""")

_TOUCH = sa.text("""
UPDATE sso_grants SET refresh_nonce = :refresh_nonce, refresh_ct = :refresh_ct,
       refreshed_at = now()
 WHERE key_id = :key_id
""")


async def get_config(db: Database, scope: Scope) -> SsoConfig | None:
    row = first(await db.read(_GET, {"org_id": scope.org_id}))
    if row is None:
        return None
    return SsoConfig(row.org_id, row.issuer, row.client_id, row.secret_nonce, row.secret_ct,
                     row.email_domain, row.email_claim, row.role_claim, dict(row.role_map),
                     row.default_role)


async def put_config(db: Database, scope: Scope, **values: Any) -> None:
    await db.write(_PUT, {**values, "org_id": scope.org_id,
                          "role_map": json.dumps(values["role_map"])})


async def start_login(db: Database, scope: Scope, *, state_hash: str, verifier: str,
                      nonce: str) -> None:
    await db.write(_START, {"org_id": scope.org_id, "state_hash": state_hash,
                            "verifier": verifier, "nonce": nonce})


async def consume_login(db: Database, state_hash: str, ttl: float
                        ) -> tuple[UUID, str, str] | None:
    """(org, PKCE verifier, nonce) of an unused login younger than `ttl` seconds, marking it
    used in the same statement; None for an unknown, expired or replayed state."""
    row = first(await db.write(_CONSUME, {"state_hash": state_hash, "ttl": ttl}))
    return None if row is None else (row.org_id, row.verifier, row.nonce)


async def put_grant(db: Database, scope: Scope, key_id: UUID, subject: str,
                    refresh: tuple[bytes, bytes] | None) -> None:
    await db.write(_PUT_GRANT, {"key_id": key_id, "org_id": scope.org_id, "subject": subject,
                                "refresh_nonce": refresh[0] if refresh else None,
                                "refresh_ct": refresh[1] if refresh else None})


async def grant_of(db: Database, key_id: UUID) -> Grant | None:
    row = first(await db.read(_GRANT, {"key_id": key_id}))
    return None if row is None else Grant(row.key_id, row.org_id, row.subject,
                                          row.refresh_nonce, row.refresh_ct)


async def touch_grant(db: Database, key_id: UUID, refresh: tuple[bytes, bytes] | None
                      ) -> None:
    await db.write(_TOUCH, {"key_id": key_id,
                            "refresh_nonce": refresh[0] if refresh else None,
                            "refresh_ct": refresh[1] if refresh else None})
