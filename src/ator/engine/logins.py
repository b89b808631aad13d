"""Throttling console logins without locking out the wrong people (layer: engine; imports
coord, errors, security.keys).

A login exchanges an API key for a session. Keys carry 190+ bits of randomness, so no
throttle is what keeps them safe; it is there to slow a client that keeps failing, and it
must never turn one client's failures into a lockout of a valid user who shares its address
(30 bad attempts from an office's NAT, or the server's own host, used to refuse every login
from it).

So only failures count, each under the address *and* the account it aimed at. The account is
the key's public prefix (`ator_<prefix>_…`, shown in key lists so people can tell keys apart);
a key of no valid shape counts under "-". The address is the client the operator trusts
(`ATOR_TRUSTED_PROXIES`: the proxy's X-Forwarded-For, else the connection's peer).

- Per (address, account): `PAIR_FAILURES` failures within `WINDOW` seconds lock that pair
  (429, with Retry-After) for a backoff that doubles with each lock within the hour: 1, 2,
  4 … minutes, at most `MAX_LOCK` seconds. The same address with another key, and the same
  key from another address, are not affected.
- Per account, across addresses: while one account collects more than `ACCOUNT_FAILURES`
  failures within a window (a guess spread over many addresses), every address that fails
  on it is locked for it at its first failure. An address that presents the right key is
  never refused by it.

A success counts nothing and clears nothing (the locks expire on their own). Counters and
locks live on the coordinator, so they hold across replicas; a lock is a lease whose token is
its expiry time, which is how a refusal knows its Retry-After.
"""

from __future__ import annotations

import time
from typing import Final

from ator.coord.base import Coordinator
from ator.errors import RateLimited
from ator.security.keys import parse_prefix

__all__ = ["ACCOUNT_FAILURES", "MAX_LOCK", "PAIR_FAILURES", "WINDOW", "LoginThrottle"]

WINDOW: Final = 60.0
PAIR_FAILURES: Final = 10
ACCOUNT_FAILURES: Final = 50
MAX_LOCK: Final = 3600.0
_FIRST_LOCK: Final = 60.0
_LOCKS_REMEMBERED: Final = 3600.0


class LoginThrottle:
    """`check` before a login attempt, `failed` after one that did not open a session."""

    def __init__(self, coord: Coordinator) -> None:
        self._coord = coord

    async def check(self, address: str, key: str) -> None:
        """Raise RateLimited (429) if this address is locked out of this key's account."""
        held = await self._coord.holder(self._lock(address, key))
        if held is None:
            return
        try:
            left = float(held) - time.time()
        except ValueError:
            left = WINDOW
        raise RateLimited("too many failed logins from this address with this key; "
                          f"wait {max(1, int(left + 0.999))} s, or check the key",
                          retry_after=max(1.0, left))

    async def failed(self, address: str, key: str) -> None:
        """Count a failed attempt; lock the (address, account) pair when it is one too many."""
        account = _account(key)
        pair = await self._coord.hit(f"login-fail:{address}:{account}", WINDOW)
        spread = await self._coord.hit(f"login-fail-account:{account}", WINDOW)
        if pair < PAIR_FAILURES and spread <= ACCOUNT_FAILURES:
            return
        locks = await self._coord.hit(f"login-locks:{address}:{account}", _LOCKS_REMEMBERED)
        ttl = min(MAX_LOCK, _FIRST_LOCK * 2 ** min(locks - 1, 16))
        await self._coord.acquire(self._lock(address, key), str(time.time() + ttl), ttl)

    @staticmethod
    def _lock(address: str, key: str) -> str:
        return f"login-lock:{address}:{_account(key)}"


def _account(key: str) -> str:
    return parse_prefix(key) or "-"
