"""The open-file budget of a serving process (layer: cli; imports settings, the standard
library's `resource`).

Every connection is a file: each HTTP client, each turn's model stream, each database and
Redis connection. With the common `ulimit -n 1024`, a burst of a thousand conversations runs
out, and accept() or a provider connect fails with EMFILE (seen as HTTP 500s). So at start
`serve` raises the soft limit toward the hard one, warns when it is still below what the
configuration needs at full load, and caps concurrent HTTP connections at what is left, so an
excess request gets a 503 from the server instead of an EMFILE deep in a handler.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

from ator.settings import Settings

__all__ = ["FileBudget", "files_needed", "plan_files", "raise_soft_limit"]

_RESERVE = 128  # log files, the listening sockets, DNS, pipes, the interpreter itself


def files_needed(settings: Settings, workers: int = 1) -> int:
    """Files one process needs at full load: a model stream and a client connection per turn
    in flight, its database pool (asyncpg may briefly hold twice its size while reconnecting)
    and Redis pools, and a fixed reserve."""
    del workers  # per process: every worker has its own limit and its own pools
    redis = settings.redis_pool_size + settings.redis_request_pool_size + 2
    redis = redis if settings.redis_url else 0
    return 2 * settings.max_turns_in_flight + 2 * settings.db_pool_size + redis + _RESERVE


def raise_soft_limit() -> tuple[int, int, int]:
    """Raise RLIMIT_NOFILE's soft limit to the hard limit (capped at 1,048,576). Returns
    (soft before, soft now, hard); a refusal by the system keeps the old limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 1 << 20
    wanted = min(wanted, 1 << 20)
    if wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            return soft, soft, hard
        return soft, wanted, hard
    return soft, soft, hard


@dataclass(frozen=True, slots=True)
class FileBudget:
    soft: int
    hard: int
    raised_from: int
    needed: int
    max_turns: int  # turns in flight the limit allows (at most the setting)
    max_connections: int  # HTTP connections the server accepts before answering 503

    @property
    def low(self) -> bool:
        return self.soft < self.needed

    def warning(self) -> str | None:
        if not self.low:
            return None
        return (f"the open-file limit is {self.soft} (hard {self.hard}) but this configuration "
                f"needs about {self.needed} at full load; turns in flight are capped at "
                f"{self.max_turns} (the rest wait in the mailbox) and HTTP connections at "
                f"{self.max_connections} (503 beyond). Raise it with `ulimit -n {self.needed}` "
                f"(or LimitNOFILE= in a systemd unit).")


def plan_files(settings: Settings, *, soft: int, hard: int, raised_from: int) -> FileBudget:
    """What a process with `soft` files can promise. Enough: everything configured, and the
    files left over go to HTTP connections. Too few: half of what the pools and the reserve
    leave goes to turns' model streams, half to HTTP connections."""
    needed = files_needed(settings)
    fixed = needed - 2 * settings.max_turns_in_flight  # pools and reserve
    if soft >= needed:
        turns = settings.max_turns_in_flight
    else:
        turns = max(1, min(settings.max_turns_in_flight, (soft - fixed) // 2))
    return FileBudget(soft=soft, hard=hard, raised_from=raised_from, needed=needed,
                      max_turns=turns, max_connections=max(16, soft - fixed - turns))
