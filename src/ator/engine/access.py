"""Who may call, with which key or console session (layer: engine; imports store, security).

The service behind authentication, API keys, console sessions and provisioning, for the HTTP
API, the socket gateway and the CLI alike (none touches the key or session store directly).
`authenticate` takes either credential: an API key (`ator_…`) or a session token (`ators_…`,
from `open_session`, which exchanges a valid key for one). A session stands for its key's
principal, read through the key, so revoking the key ends the session as well.

Authentication is read-mostly: a key's principal is cached by the key's hash for a few
seconds (bounded LRU), so a busy key is not a database round trip per request, and
`last_used_at` is written at most once a minute per key instead of on every request (one
key used to be one hot row). A key revoked here leaves this replica's cache at once; other
replicas stop accepting it within `AUTH_CACHE_TTL` seconds.

Provisioning: `bootstrap` creates the operator org, its admin and key on an empty database
(replicas starting together serialize on an advisory lock, so one creates it).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from datetime import datetime
from uuid import UUID

from ator.errors import Conflict
from ator.security.keys import hash_key, parse_prefix
from ator.security.sessions import hash_session, is_session_token, new_session_token
from ator.settings import Settings
from ator.store import keys as key_store
from ator.store import orgs as org_store
from ator.store import sessions as session_store
from ator.store.database import Database
from ator.store.records import ApiKey, Principal
from ator.store.scope import Scope

__all__ = ["AUTH_CACHE_TTL", "Access"]

AUTH_CACHE_TTL = 10.0  # seconds a cached principal is trusted (revocation delay elsewhere)
_TOUCH_EVERY = 60.0  # seconds between writes of one key's last_used_at
_CACHE_SIZE = 10_000
_BOOTSTRAP_LOCK = 0x61746F73  # pg advisory lock key serializing the first start

class Access:
    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self._settings = settings
        # key hash -> (principal, cached at, last_used_at written at), monotonic seconds
        self._cache: OrderedDict[str, tuple[Principal, float, float]] = OrderedDict()

    async def authenticate(self, key: str) -> Principal | None:
        """The principal of a valid, unrevoked key or live session; None otherwise."""
        if is_session_token(key):
            return await self._session(key)
        if parse_prefix(key) is None:
            return None
        digest = hash_key(key)
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None and now - hit[1] < AUTH_CACHE_TTL:
            self._cache.move_to_end(digest)
            principal, _cached, touched = hit
            if now - touched >= _TOUCH_EVERY:
                await key_store.touch_key(self._db, principal.key_id)
                self._cache[digest] = (principal, hit[1], now)
            return principal
        found = await key_store.key_principal(self._db, digest)
        if found is None:
            self._cache.pop(digest, None)
            return None
        principal, idle = found
        touched = hit[2] if hit is not None else now - idle
        if now - touched >= _TOUCH_EVERY:
            await key_store.touch_key(self._db, principal.key_id)
            touched = now
        self._remember(digest, principal, now, touched)
        return principal

    async def _session(self, token: str) -> Principal | None:
        digest = hash_session(token)
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None and now - hit[1] < AUTH_CACHE_TTL:
            self._cache.move_to_end(digest)
            return hit[0]
        found = await session_store.session_principal(self._db, digest)
        if found is None:
            self._cache.pop(digest, None)
            return None
        principal, expires = found
        # Cached as if read earlier, so the entry goes stale no later than the session ends.
        expires_in = expires.timestamp() - time.time()
        self._remember(digest, principal, min(now, now + expires_in - AUTH_CACHE_TTL), now)
        return principal

    def _remember(self, digest: str, principal: Principal, cached: float, touched: float
                  ) -> None:
        self._cache[digest] = (principal, cached, touched)
        self._cache.move_to_end(digest)
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)

    async def open_session(self, key: str) -> tuple[str, Principal, datetime] | None:
        """Exchange a valid API key for a session token (shown once, stored hashed);
        None if the key is not valid. The session expires after `session_ttl` seconds."""
        if is_session_token(key):
            return None  # a session does not beget sessions
        principal = await self.authenticate(key)
        if principal is None:
            return None
        token = new_session_token()
        expires = await session_store.create_session(
            self._db, principal.key_id, hash_session(token), self._settings.session_ttl)
        if expires is None:  # revoked between the two statements
            return None
        return token, principal, expires

    async def close_session(self, token: str) -> bool:
        """Log out: the session stops working on this replica now, on others within
        AUTH_CACHE_TTL seconds. False if it was not a live session."""
        if not is_session_token(token):
            return False
        digest = hash_session(token)
        self._cache.pop(digest, None)
        return await session_store.revoke_session(self._db, digest)

    async def issue_key(
        self, scope: Scope, *, email: str, role: str, name: str
    ) -> tuple[ApiKey, str]:
        """A key for the org's user `email` (created if new). The key is returned once."""
        try:
            user_id = await org_store.create_user(self._db, scope, email, role)
        except Conflict:
            user_id = await org_store.find_user(self._db, scope, email)
        return await key_store.create_key(self._db, scope, user_id=user_id, name=name,
                                          role=role)

    async def list_keys(self, scope: Scope) -> list[ApiKey]:
        return await key_store.list_keys(self._db, scope)

    async def revoke_key(self, scope: Scope, key_id: UUID) -> ApiKey:
        revoked = await key_store.revoke_key(self._db, scope, key_id)
        # This replica stops accepting it now; others within AUTH_CACHE_TTL.
        for digest, (principal, _, _) in list(self._cache.items()):
            if principal.key_id == key_id:
                del self._cache[digest]
        return revoked

    async def bootstrap(self) -> tuple[str, bool] | None:
        """On a database with no API key: create the operator org, an admin and a key.
        Returns (key, preset) - preset when it is ATOR_BOOTSTRAP_KEY, which the caller must
        not print - or None if keys exist already."""
        preset = self._settings.bootstrap_key
        wanted = preset.get_secret_value() if preset is not None else None
        # Checked before anything is written: a key created and then refused would leave the
        # operator with a key nobody saw, and keep a corrected preset from ever applying.
        if wanted is not None and parse_prefix(wanted) is None:
            raise ValueError("ATOR_BOOTSTRAP_KEY must look like ator_<8 hex>_<secret>")
        async with self._db.advisory_lock(_BOOTSTRAP_LOCK):
            if await key_store.any_key_exists(self._db):
                return None
            org = await org_store.create_org(self._db, "operator")
            await key_store.mark_operator(self._db, org.id)
            scope = Scope(org.id)
            user_id = await org_store.create_user(self._db, scope, "admin@localhost", "admin")
            record, key = await key_store.create_key(self._db, scope, user_id=user_id,
                                                     name="bootstrap", role="admin")
            if wanted is None:
                return key, False
            await key_store.replace_key_hash(self._db, record.id, wanted[5:13],
                                             hash_key(wanted))
            return wanted, True
