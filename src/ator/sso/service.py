"""Single sign-on for the console: OpenID Connect, authorization code with PKCE (layer: sso;
imports authlib (PKCE), joserfc (ID token), ator.errors, ator.net, ator.security, ator.settings,
ator.store).

Per org: the issuer, the client (its secret encrypted under the master key), the email
domain a person's email must be in (and the claim that holds it), and how a claim's values
map to ator roles (the highest mapped role wins; else the default role).

    begin  → a login row (hash of the state, PKCE verifier, nonce) and the IdP's authorize URL
    finish → the state consumed once (a replay finds nothing), the code exchanged *with the
             verifier*, the ID token verified (signature by the IdP's JWKS, `iss` is the
             configured issuer, `aud` the client, the nonce ours, not expired), the person
             mapped to a user and role of the org, a key minted for them with the grant
             (refresh token, encrypted) beside it, and a console session on that key —
             the console's own cookie session, lasting `sso_session_ttl`
    refresh → the grant's refresh token at the IdP; a person the IdP no longer accepts
             (disabled, removed) loses the key and every session on it, now

Every request to the IdP goes through the egress guard on the plain rule (the issuer is a
tenant's setting): an IdP on a private network needs the operator's allowlist.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

import httpx
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from ator.errors import AtorError, Conflict, NotFound, ValidationFailed
from ator.net import Egress
from ator.security.crypto import MasterKey
from ator.security.roles import ROLES
from ator.security.sessions import hash_session, new_session_token
from ator.settings import Settings
from ator.store import keys as key_store
from ator.store import orgs as org_store
from ator.store import sessions as session_store
from ator.store import sso as store
from ator.store.records import Principal
from ator.store.scope import Scope

__all__ = ["Login", "Sso", "SsoRefused"]

_LOGIN_TTL = 600.0  # seconds a login may take at the IdP
_RANK: dict[str, int] = {role: i for i, role in enumerate(ROLES)}


class SsoRefused(AtorError):
    """The sign-in cannot be completed (state, token, person or IdP said no)."""

    kind = "auth"
    code = "sso_refused"
    status = 401


@dataclass(frozen=True, slots=True)
class Login:
    token: str  # the console session token (the cookie)
    principal: Principal
    expires: datetime


def _ctx(org_id: UUID, what: str) -> str:
    return f"sso:{what}:{org_id}"


def _state_hash(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


class Sso:
    def __init__(self, db: Any, settings: Settings, master_key: MasterKey,
                 egress: Egress, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.db = db
        self.settings = settings
        self.key = master_key
        self.http = egress.httpx_client(timeout=30.0, transport=transport)
        self._discovery: dict[str, tuple[float, dict[str, Any]]] = {}

    async def aclose(self) -> None:
        await self.http.aclose()

    # Configuration -------------------------------------------------------------------------

    async def configure(self, scope: Scope, *, issuer: str, client_id: str,
                        client_secret: str | None, email_domain: str | None,
                        email_claim: str = "email", role_claim: str | None = None,
                        role_map: dict[str, str] | None = None,
                        default_role: str = "member") -> None:
        """Set the org's OIDC client. Raises ValidationFailed for a bad issuer or role."""
        if not issuer.startswith(("https://", "http://")) or issuer.endswith("/"):
            raise ValidationFailed("issuer is the IdP's URL exactly as its tokens name it, "
                                   "without a trailing slash", code="sso_invalid_issuer")
        for role in [default_role, *(role_map or {}).values()]:
            if role not in ROLES:
                raise ValidationFailed(f"unknown role {role!r}", code="invalid_role")
        secret = (self.key.encrypt(client_secret, context=_ctx(scope.org_id, "client"))
                  if client_secret else (None, None))
        await store.put_config(
            self.db, scope, issuer=issuer, client_id=client_id, secret_nonce=secret[0],
            secret_ct=secret[1], email_domain=(email_domain or "").lower() or None,
            email_claim=email_claim, role_claim=role_claim, role_map=role_map or {},
            default_role=default_role)

    async def find(self, scope: Scope) -> store.SsoConfig | None:
        return await store.get_config(self.db, scope)

    async def config(self, scope: Scope) -> store.SsoConfig:
        found = await store.get_config(self.db, scope)
        if found is None:
            raise NotFound("this org has no single sign-on", code="sso_not_configured")
        return found

    # The login -----------------------------------------------------------------------------

    async def begin(self, org_id: UUID, redirect_uri: str) -> str:
        """A new login for the org; the IdP's authorize URL to send the browser to."""
        scope = Scope(org_id)
        config = await self.config(scope)
        meta = await self._meta(config.issuer)
        state, verifier, nonce = (secrets.token_urlsafe(32), secrets.token_urlsafe(48),
                                  secrets.token_urlsafe(16))
        await store.start_login(self.db, scope, state_hash=_state_hash(state),
                                verifier=verifier, nonce=nonce)
        query = urlencode({
            "response_type": "code", "client_id": config.client_id,
            "redirect_uri": redirect_uri, "scope": "openid email profile offline_access",
            "state": state, "nonce": nonce,
            "code_challenge": create_s256_code_challenge(verifier),
            "code_challenge_method": "S256"})
        return f"{meta['authorization_endpoint']}?{query}"

    async def finish(self, *, code: str, state: str, redirect_uri: str) -> Login:
        """Complete a login. Raises SsoRefused (`sso_state_invalid`: unknown, expired or
        replayed state; `sso_token_invalid`: the IdP's answer does not verify;
        `sso_person_refused`: the email is outside the org's domain)."""
        login = await store.consume_login(self.db, _state_hash(state), _LOGIN_TTL)
        if login is None:
            raise SsoRefused("this sign-in link was already used or has expired: start "
                             "again", code="sso_state_invalid")
        org_id, verifier, nonce = login
        scope = Scope(org_id)
        config = await self.config(scope)
        meta = await self._meta(config.issuer)
        tokens = await self._token(meta, config, {
            "grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
            "code_verifier": verifier})
        claims = await self._verify(meta, config, tokens.get("id_token"), nonce)
        email, role = self._person(config, claims)
        try:
            user_id = await org_store.create_user(self.db, scope, email, role)
        except AtorError:
            user_id = await org_store.find_user(self.db, scope, email)
        made, secret = await key_store.create_key(self.db, scope, user_id=user_id,
                                                  name=f"sso:{claims['sub']}"[:200], role=role)
        await store.put_grant(self.db, scope, made.id, str(claims["sub"]),
                              self._seal(org_id, tokens.get("refresh_token")))
        del secret  # the key itself is never shown: the session stands for it
        return await self._session(made.id)

    async def made(self, principal: Principal) -> bool:
        """Whether single sign-on made this principal's key (its sessions are refreshed)."""
        return await store.grant_of(self.db, principal.key_id) is not None

    async def refresh(self, principal: Principal) -> Login:
        """A new session for an SSO session's person, if the IdP still accepts them.
        Raises SsoRefused (`sso_refused`) and revokes the key when it does not; Conflict
        for a session that SSO did not make."""
        grant = await store.grant_of(self.db, principal.key_id)
        if grant is None:  # 409, not 401: the session itself is fine
            raise Conflict("this session was not made by single sign-on: nothing to refresh",
                           code="sso_not_sso_session")
        scope = Scope(grant.org_id)
        config = await self.config(scope)
        meta = await self._meta(config.issuer)
        refresh = (self.key.decrypt(grant.refresh_nonce, grant.refresh_ct,
                                    context=_ctx(grant.org_id, "refresh"))
                   if grant.refresh_nonce and grant.refresh_ct else None)
        try:
            if refresh is None:
                raise SsoRefused("the identity provider gave no refresh token")
            tokens = await self._token(meta, config, {"grant_type": "refresh_token",
                                                      "refresh_token": refresh})
        except SsoRefused:
            await key_store.revoke_key(self.db, scope, grant.key_id)
            raise SsoRefused("the identity provider no longer accepts this person: sign in "
                             "again", code="sso_refused") from None
        await store.touch_grant(self.db, grant.key_id,
                                self._seal(grant.org_id, tokens.get("refresh_token") or refresh))
        return await self._session(grant.key_id)

    # The IdP -------------------------------------------------------------------------------

    async def _meta(self, issuer: str) -> dict[str, Any]:
        cached = self._discovery.get(issuer)
        if cached is not None and time.monotonic() - cached[0] < 300:
            return cached[1]
        try:
            response = await self.http.get(f"{issuer}/.well-known/openid-configuration")
            meta = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            meta = None
        if not isinstance(meta, dict) or meta.get("issuer") != issuer:
            raise SsoRefused("the identity provider's discovery document could not be read, "
                             "or names another issuer", code="sso_idp_unavailable")
        self._discovery[issuer] = (time.monotonic(), meta)
        return meta

    async def _token(self, meta: dict[str, Any], config: store.SsoConfig,
                     form: dict[str, str]) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if config.secret_nonce and config.secret_ct:  # client_secret_basic
            extra["auth"] = (config.client_id, self.key.decrypt(
                config.secret_nonce, config.secret_ct, context=_ctx(config.org_id, "client")))
        try:
            response = await self.http.post(meta["token_endpoint"],
                                            data={**form, "client_id": config.client_id},
                                            **extra)
            body = response.json()
        except (httpx.HTTPError, ValueError, KeyError):
            raise SsoRefused("the identity provider did not answer",
                             code="sso_idp_unavailable") from None
        if response.status_code != 200 or not isinstance(body, dict):
            raise SsoRefused("the identity provider refused the sign-in",
                             code="sso_token_refused")
        return body

    async def _verify(self, meta: dict[str, Any], config: store.SsoConfig, id_token: Any,
                      nonce: str) -> dict[str, Any]:
        if not isinstance(id_token, str):
            raise SsoRefused("the identity provider sent no ID token", code="sso_token_invalid")
        try:
            jwks = (await self.http.get(meta["jwks_uri"])).json()
            keys = KeySet.import_key_set(jwks)
            token = jwt.decode(id_token, keys, algorithms=["RS256", "ES256", "PS256"])
            jwt.JWTClaimsRegistry(
                iss={"essential": True, "value": config.issuer},
                aud={"essential": True, "value": config.client_id},
                nonce={"essential": True, "value": nonce},
                sub={"essential": True}, exp={"essential": True}, leeway=60,
            ).validate(token.claims)
        except (JoseError, httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise SsoRefused(f"the ID token does not verify ({type(exc).__name__})",
                             code="sso_token_invalid") from None
        return dict(token.claims)

    def _person(self, config: store.SsoConfig, claims: dict[str, Any]) -> tuple[str, str]:
        email = claims.get(config.email_claim)
        if not isinstance(email, str) or "@" not in email or \
                claims.get("email_verified") is False:
            raise SsoRefused("the identity provider named no verified email",
                             code="sso_person_refused")
        email = email.strip().lower()
        if config.email_domain and not email.endswith("@" + config.email_domain):
            raise SsoRefused("this person's email is not in the org's domain",
                             code="sso_person_refused")
        role = config.default_role
        if config.role_claim:
            values = claims.get(config.role_claim)
            values = [values] if isinstance(values, str) else values
            mapped = [config.role_map[v] for v in values or [] if isinstance(v, str)
                      and v in config.role_map]
            if mapped:
                role = min(mapped, key=lambda r: _RANK[r])  # ROLES lists admin first
        return email, role

    # Sessions ------------------------------------------------------------------------------

    def _seal(self, org_id: UUID, refresh: Any) -> tuple[bytes, bytes] | None:
        if not isinstance(refresh, str) or not refresh:
            return None
        return self.key.encrypt(refresh, context=_ctx(org_id, "refresh"))

    async def _session(self, key_id: UUID) -> Login:
        token = new_session_token()
        expires = await session_store.create_session(self.db, key_id, hash_session(token),
                                                     self.settings.sso_session_ttl)
        if expires is None:
            raise SsoRefused("the sign-in was revoked meanwhile", code="sso_refused")
        found = await session_store.session_principal(self.db, hash_session(token))
        if found is None:
            raise SsoRefused("the sign-in was revoked meanwhile", code="sso_refused")
        return Login(token, found[0], expires)
