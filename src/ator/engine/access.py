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
replicas stop accepting it within `AUTH_CACHE_TTL` seconds. Requests that miss the cache for
the same credential at the same moment (a burst of a thousand POSTs with one key, just after
its entry went stale) share one lookup instead of each reading the database (`_shared`).

Provisioning: `bootstrap` creates the operator org, its admin and key on an empty database
(replicas starting together serialize on an advisory lock, so one creates it).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
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
        self._lookups: dict[str, asyncio.Future[Principal | None]] = {}  # by digest, running
        # Keys and sessions revoked here so far: a lookup begun before one is stale.
        self._revocations = 0

    async def authenticate(self, key: str) -> Principal | None:
        """The principal of a valid, unrevoked key or live session; None otherwise."""
        if is_session_token(key):
            return await self._session(key)
        if parse_prefix(key) is None:
            return None
        digest = hash_key(key)
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is None or now - hit[1] >= AUTH_CACHE_TTL:
            return await self._shared(digest, self._read_key)
        self._cache.move_to_end(digest)
        principal, cached, touched = hit
        if now - touched >= _TOUCH_EVERY:
            self._cache[digest] = (principal, cached, now)  # before the await: one touch
            await key_store.touch_key(self._db, principal.key_id)
        return principal

    async def _read_key(self, digest: str, revoked: int) -> Principal | None:
        found = await key_store.key_principal(self._db, digest)
        if found is None:
            self._cache.pop(digest, None)
            return None
        principal, idle = found
        now = time.monotonic()
        hit = self._cache.get(digest)
        touched = hit[2] if hit is not None else now - idle
        if now - touched >= _TOUCH_EVERY:
            await key_store.touch_key(self._db, principal.key_id)
            touched = now
        self._remember(digest, principal, now, touched, revoked)
        return principal

    async def _session(self, token: str) -> Principal | None:
        digest = hash_session(token)
        hit = self._cache.get(digest)
        if hit is not None and time.monotonic() - hit[1] < AUTH_CACHE_TTL:
            self._cache.move_to_end(digest)
            return hit[0]
        return await self._shared(digest, self._read_session)

    async def _read_session(self, digest: str, revoked: int) -> Principal | None:
        found = await session_store.session_principal(self._db, digest)
        if found is None:
            self._cache.pop(digest, None)
            return None
        principal, expires = found
        now = time.monotonic()
        # Cached as if read earlier, so the entry goes stale no later than the session ends.
        expires_in = expires.timestamp() - time.time()
        self._remember(digest, principal, min(now, now + expires_in - AUTH_CACHE_TTL), now,
                       revoked)
        return principal

    async def _shared(self, digest: str,
                      read: Callable[[str, int], Awaitable[Principal | None]]
                      ) -> Principal | None:
        """`read(digest, revocations)`, once for every caller that misses the cache for the
        same credential while it runs. Shielded: a caller cancelled (its client went away)
        leaves the lookup to the others."""
        lookup = self._lookups.get(digest)
        if lookup is None:
            lookup = asyncio.ensure_future(read(digest, self._revocations))
            self._lookups[digest] = lookup
            lookup.add_done_callback(lambda done: self._looked_up(digest, done))
        return await asyncio.shield(lookup)

    def _looked_up(self, digest: str, done: asyncio.Future[Principal | None]) -> None:
        if self._lookups.get(digest) is done:
            del self._lookups[digest]  # a failed lookup is tried again by the next caller
        if not done.cancelled():
            done.exception()  # retrieved here when every caller went before it ended

    def _remember(self, digest: str, principal: Principal, cached: float, touched: float,
                  revoked: int) -> None:
        """Cache what a lookup read, unless a key or session was revoked here since it began
        (it may have read before the revocation committed)."""
        if revoked != self._revocations:
            return
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
        closed = await session_store.revoke_session(self._db, digest)
        self._forget(lambda cached, _principal: cached == digest)
        return closed

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
        self._forget(lambda _digest, principal: principal.key_id == key_id)
        return revoked

    def _forget(self, which: Callable[[str, Principal], bool]) -> None:
        """After a revocation committed: drop the cached credentials it ends, and make every
        lookup still running stale (it may have read before the commit), so that neither
        caches it nor is joined by a later request."""
        self._revocations += 1
        self._lookups.clear()
        for digest, (principal, _, _) in list(self._cache.items()):
            if which(digest, principal):
                del self._cache[digest]

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
