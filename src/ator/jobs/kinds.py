"""Job kinds and what a handler is given (layer: jobs; imports ator.errors, ator.store).

A feature contributes `JobKind`s (the extension seam registers them on the composition
root's `JobKinds`); a kind names its handler and its policy: attempts, backoff, timeout,
per-org concurrency and default priority. A handler is `async (ctx, payload) -> None`:

- returning completes the job (after the handler, in a batched statement: **at-least-once**
  — a worker that dies between the handler and that statement leaves the job to run again
  after its lease);
- `await ctx.complete(conn)` inside the handler's own transaction completes it *in* that
  transaction: the handler's writes and the completion commit together or not at all, so
  those writes happen **exactly once** (a lost lease raises `LeaseLost` and rolls them back);
- raising `Retry(after=…)` asks for another attempt no sooner than `after` seconds; any
  other exception is a failed attempt retried with exponential backoff and jitter; when the
  attempts are spent the job is `dead`, keeping its last error, until replayed.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from ator.errors import AtorError, ConfigError
from ator.store import jobs as job_store
from ator.store.database import Connection, Database
from ator.store.scope import Scope

__all__ = ["Handler", "JobContext", "JobKind", "JobKinds", "LeaseLost", "Retry"]

Handler = Callable[["JobContext", dict[str, Any]], Awaitable[None]]


class Retry(Exception):
    """Raised by a handler: try again no sooner than `after` seconds (counts as an attempt)."""

    def __init__(self, after: float, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.after = max(0.0, after)


class LeaseLost(AtorError):
    """The worker no longer holds this job (its lease expired and it was rescued)."""

    kind = "lease_lost"
    code = "job_lease_lost"
    status = 409


@dataclass(frozen=True, slots=True)
class JobKind:
    name: str
    handler: Handler
    max_attempts: int = 5
    backoff_base: float = 1.0  # seconds before the 2nd attempt; doubles per attempt
    backoff_cap: float = 600.0
    timeout: float = 300.0  # per attempt
    per_org_limit: int | None = None  # running jobs of this kind per org, across workers
    priority: int = 0  # default; higher runs first within an org

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.timeout <= 0 or self.backoff_base < 0:
            raise ConfigError(f"job kind {self.name!r}: attempts ≥ 1, timeout > 0, backoff ≥ 0")
        if self.per_org_limit is not None and self.per_org_limit < 1:
            raise ConfigError(f"job kind {self.name!r}: per_org_limit must be ≥ 1")

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Delay after failed attempt `attempt` (1-based): base·2^(attempt-1) capped, with
        equal jitter (half fixed, half random) so retries of a burst spread out."""
        delay = min(self.backoff_cap, self.backoff_base * 2 ** (attempt - 1))
        return float(delay / 2 + (rng or random).uniform(0, delay / 2))


class JobKinds:
    """The registry of kinds this process can run (built at the composition root)."""

    def __init__(self, kinds: Iterator[JobKind] | list[JobKind] | tuple[JobKind, ...] = ()):
        self._kinds: dict[str, JobKind] = {}
        for kind in kinds:
            self.register(kind)

    def register(self, kind: JobKind) -> None:
        """Add a kind. Two kinds of one name are a configuration error, not an overwrite."""
        if kind.name in self._kinds:
            raise ConfigError(f"job kind {kind.name!r} is registered twice")
        self._kinds[kind.name] = kind

    def get(self, name: str) -> JobKind:
        try:
            return self._kinds[name]
        except KeyError:
            raise ConfigError(f"unknown job kind {name!r}", code="job_kind_unknown") from None

    def __contains__(self, name: object) -> bool:
        return name in self._kinds

    def __iter__(self) -> Iterator[JobKind]:
        return iter(self._kinds.values())

    def __len__(self) -> int:
        return len(self._kinds)


@dataclass(slots=True)
class JobContext:
    """What a handler knows of its job. `scope` is the job's org; `request_id` the id of the
    request that enqueued it (also set in the logging context while the handler runs)."""

    id: int
    kind: str
    scope: Scope
    attempt: int
    max_attempts: int
    request_id: str | None
    db: Database
    owner: str
    schedule_id: UUID | None = None
    tick: datetime | None = None  # the schedule tick this job fires for
    completed: bool = field(default=False)

    async def complete(self, conn: Connection) -> None:
        """Complete the job in the caller's transaction (exactly-once for its writes).
        Raises LeaseLost (roll the transaction back) when another worker now owns it."""
        if not await job_store.complete_in(conn, self.owner, self.id, self.attempt):
            raise LeaseLost(f"job {self.id} attempt {self.attempt} is no longer ours")
        self.completed = True
