"""The `Analyses` service: kinds, triggers, records and the registry's figures (layer:
analyses; imports ator.jobs, ator.store, ator.errors, ator.analyses.*).

Kinds come from code (`define`, process-wide: an extension's) or from an org (`register`,
a JSON spec checked by `kind.from_spec`, versioned in `analysis_kinds`); an org's kind may
not take the name of one in code. `trigger` queues a run (`analyses.run`); `schedule` makes
a per-org schedule of runs (a schedule row of the jobs kernel: the org's own context, one
firing per tick, a missed run caught up once — overlap `skip` over a catch-up window).
`stats` is the last 30 days per kind: runs, model calls, cost, cache hits and the rule's
fallback rate among runs that were not cache hits, flagged above 20%.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any
from uuid import UUID

from ator.analyses.kind import AnalysisKind, from_spec
from ator.analyses.runner import RUN, message
from ator.errors import Conflict, NotFound, ValidationFailed
from ator.jobs import JobQueue, Schedules
from ator.security.limits import JsonLimits, check_json
from ator.store import analyses as store
from ator.store.analyses import Analysis, KindRow
from ator.store.database import Database
from ator.store.schedules import ScheduleRow
from ator.store.scope import Scope

__all__ = ["FALLBACK_FLAG", "Analyses"]

#: A kind whose rule answers more often than this (of the runs that were not cache hits)
#: is flagged in the registry.
FALLBACK_FLAG = 0.20
_MAX_TARGET = 200
#: How big an org's kind spec and a run's options may be.
KIND_SPEC = JsonLimits(max_bytes=256 * 1024, max_depth=32, max_items=20_000)
RUN_OPTIONS = JsonLimits(max_bytes=64 * 1024, max_depth=16, max_items=2_000)
#: Checks an org kind's (provider, model, config) as a setup's would be checked.
ModelCheck = Callable[[str, str, Mapping[str, Any]], None]


class Analyses:
    def __init__(self, db: Database, queue: JobQueue, schedules: Schedules,
                 check_model: ModelCheck | None = None) -> None:
        self.db = db
        self.check_model = check_model
        self.queue = queue
        self.schedules = schedules
        self._code: dict[str, AnalysisKind] = {}
        self._parsed: dict[tuple[UUID, str, int], AnalysisKind] = {}

    # Kinds --------------------------------------------------------------------------------

    def define(self, kind: AnalysisKind) -> None:
        """Add a kind defined in code (every org may run it). Two of one name are an error."""
        if kind.name in self._code:
            raise Conflict(f"analysis kind {kind.name!r} is defined twice", code="kind_exists")
        self._code[kind.name] = kind

    @property
    def code_kinds(self) -> list[AnalysisKind]:
        return list(self._code.values())

    async def kind(self, scope: Scope, name: str) -> AnalysisKind:
        """The kind `name` for this org (code first). Raises NotFound."""
        found = self._code.get(name)
        if found is not None:
            return found
        row = await store.get_kind(self.db, scope, name)
        if row is None:
            raise NotFound("analysis kind not found", code="not_found")
        key = (scope.org_id, name, row.version)
        parsed = self._parsed.get(key)
        if parsed is None:
            parsed = from_spec(name, row.spec, version=row.version)
            if len(self._parsed) > 1024:
                self._parsed.clear()
            self._parsed[key] = parsed
        return parsed

    async def register(self, scope: Scope, name: str, spec: Mapping[str, Any]) -> KindRow:
        """Create or replace an org's kind from its spec. Raises ValidationFailed
        (`invalid_kind`) or Conflict (`kind_exists`: a kind in code has the name)."""
        if name in self._code:
            raise Conflict(f"{name!r} is a built-in analysis kind", code="kind_exists")
        check_json(spec, KIND_SPEC, ("spec",))
        kind = from_spec(name, spec)  # refused here, never at run time
        if self.check_model is not None:  # the provider's config rules, like a setup's
            self.check_model(kind.provider, kind.model, kind.config)
        return await store.put_kind(self.db, scope, name, dict(spec))

    async def org_kinds(self, scope: Scope) -> list[KindRow]:
        return await store.list_kinds(self.db, scope)

    async def delete_kind(self, scope: Scope, name: str) -> None:
        if not await store.delete_kind(self.db, scope, name):
            raise NotFound("analysis kind not found", code="not_found")

    # Runs ---------------------------------------------------------------------------------

    async def trigger(self, scope: Scope, kind: str, target: str, *, origin: str = "api",
                      options: Mapping[str, Any] | None = None,
                      then: list[str] | None = None, force: bool = False) -> int:
        """Queue a run; returns its job id. Raises NotFound (the kind, or a chained one)."""
        _check_target(target)
        check_json(dict(options or {}), RUN_OPTIONS, ("options",))
        for name in (kind, *(then or ())):
            await self.kind(scope, name)
        opts = dict(options or {})
        if force:
            opts["force"] = True
        job = await self.queue.enqueue(scope, RUN, message(kind, target, origin=origin,
                                                           options=opts, then=then or (),
                                                           org=scope.org_id))
        assert job is not None  # no unique key: always queued
        return job

    async def schedule(self, scope: Scope, kind: str, *, target: str, cron: str,
                       zone: str = "UTC", options: Mapping[str, Any] | None = None,
                       catch_up: float = 7 * 86_400.0) -> ScheduleRow:
        """A recurring run of `kind` on `target` for this org. A firing skips while the
        previous one is still queued or running, so ticks missed while nothing ran (within
        `catch_up`) are recovered by one run, not one per tick."""
        _check_target(target)
        await self.kind(scope, kind)
        return await self.schedules.create(
            scope, name=f"analysis:{kind}:{target}"[:200], kind=RUN,
            payload=message(kind, target, origin="schedule", options=options,
                            org=scope.org_id),
            cron=cron, zone=zone, overlap="skip", catch_up=catch_up)

    # Records and the registry ---------------------------------------------------------------

    async def get(self, scope: Scope, analysis_id: UUID) -> Analysis:
        found = await store.get(self.db, scope, analysis_id)
        if found is None:
            raise NotFound("no such analysis", code="not_found")
        return found

    async def records(self, scope: Scope, *, kind: str | None = None, target: str | None = None,
                   limit: int = 50) -> list[Analysis]:
        return await store.list_analyses(self.db, scope, kind=kind, target=target,
                                         limit=limit)

    async def stats(self, scope: Scope, *, days: int = 30) -> list[dict[str, Any]]:
        out = []
        for row in await store.stats(self.db, scope, days=days):
            computed = row["runs"] - row["cache_hits"]
            rate = row["fallbacks"] / computed if computed else 0.0
            out.append({**row, "cost_usd": str(Decimal(row["cost_usd"])),
                        "fallback_rate": round(rate, 4), "flagged": rate > FALLBACK_FLAG})
        return out


def _check_target(target: str) -> None:
    if not isinstance(target, str) or not target or len(target) > _MAX_TARGET:
        raise ValidationFailed(f"target is a non-empty string of at most {_MAX_TARGET} "
                               "characters", code="invalid_target")
