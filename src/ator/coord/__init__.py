"""Coordination between replicas (layer: coord; imports ator.errors and redis).

`coordinator_from_url(settings.redis_url)` picks the implementation: no URL means one
process (`LocalCoordinator`); a `redis://` or `rediss://` URL means many (`RedisCoordinator`).
"""

from __future__ import annotations

from ator.coord.base import Coordinator, Listener, Subscription
from ator.coord.fanout import Hub, Waiter
from ator.coord.local import LocalCoordinator
from ator.coord.redis import RedisCoordinator
from ator.errors import ConfigError

__all__ = [
    "Coordinator",
    "Hub",
    "Listener",
    "LocalCoordinator",
    "RedisCoordinator",
    "Subscription",
    "Waiter",
    "coordinator_from_url",
]


def coordinator_from_url(
    url: str | None,
    *,
    prefix: str = "ator:",
    pool_size: int = 32,
    request_pool_size: int = 32,
    pool_timeout: float = 2.0,
) -> Coordinator:
    """The coordinator for `url`: None -> LocalCoordinator, redis(s):// -> RedisCoordinator.

    `prefix` namespaces keys and channels: deployments sharing one Redis need distinct ones
    (pub/sub ignores Redis database numbers). Raises ConfigError for any other URL (or one
    redis-py cannot parse). Connects lazily. The pool arguments size Redis's
    connection pools (see RedisCoordinator); the local coordinator has none.
    """
    if url is None:
        return LocalCoordinator()
    if url.startswith(("redis://", "rediss://")):
        return RedisCoordinator(url, prefix=prefix, pool_size=pool_size,
                                request_pool_size=request_pool_size, pool_timeout=pool_timeout)
    raise ConfigError(f"unsupported coordinator URL scheme: {url.split(':', 1)[0]!r}")
