"""Coordination between replicas (layer: coord; imports ator.errors and redis).

`coordinator_from_url(settings.redis_url)` picks the implementation: no URL means one
process (`LocalCoordinator`); a `redis://` or `rediss://` URL means many (`RedisCoordinator`).
"""

from __future__ import annotations

from ator.coord.base import Coordinator, Subscription
from ator.coord.local import LocalCoordinator
from ator.coord.redis import RedisCoordinator
from ator.errors import ConfigError

__all__ = [
    "Coordinator",
    "LocalCoordinator",
    "RedisCoordinator",
    "Subscription",
    "coordinator_from_url",
]


def coordinator_from_url(url: str | None, *, prefix: str = "ator:") -> Coordinator:
    """The coordinator for `url`: None -> LocalCoordinator, redis(s):// -> RedisCoordinator.

    `prefix` namespaces keys and channels: deployments sharing one Redis need distinct ones
    (pub/sub ignores Redis database numbers). Raises ConfigError for any other URL (or one
    redis-py cannot parse). Connects lazily.
    """
    if url is None:
        return LocalCoordinator()
    if url.startswith(("redis://", "rediss://")):
        return RedisCoordinator(url, prefix=prefix)
    raise ConfigError(f"unsupported coordinator URL scheme: {url.split(':', 1)[0]!r}")
