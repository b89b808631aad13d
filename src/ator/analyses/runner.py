"""Running one analysis: the job handler of `analyses.run` (layer: analyses; imports
ator.jobs, ator.store, ator.analyses.*).

A message is `{kind, target, origin, options, then, org}`; the job adds `attempt` and
`request_id` (the worker sets the request id and the org in the logging context, so every
line logged here and in every chained run carries them). One run:

1. build the input for the target (None: "nothing to analyze", the run ends);
2. hash `{kind, version, key fields, documents read}` (SHA-256 of canonical JSON); unless
   `options.force`, a stored cacheable analysis with the same target, kind and hash is the
   answer: no model call (one statement that also counts the hit). A forced run stores a
   hash that never serves as cache (`cacheable` false);
3. call the model through `ModelWork` (reserved, billed under `analysis:<kind>`); at the
   org's limit the kind's `at_limit` decides: `rule` stores the rule's result with no model
   call, `refuse` stores nothing;
4. validate in code (validate.py); a rejected or unparseable output runs the rule instead
   (model `rule`, cost 0; what the call cost is kept as `spent_usd`);
5. store it, count it, queue the chained kinds (`then`: same org, same target, same request
   id) and complete the job, in one transaction; then log `<kind>_generated` and apply.

A provider failure fails the attempt (retried with backoff; after the kind of job's 3rd
attempt the job is dead, kept for replay). Apply steps run after the commit: a thread
message is idempotent per analysis (its mailbox client id), a webhook event is written in
the transaction itself, a workflow run is idempotent per analysis (its key).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal
from typing import Any
from uuid import UUID

from ator import jsonenc
from ator.analyses.inputs import InputContext
from ator.analyses.kind import AnalysisKind, render
from ator.analyses.validate import Verdict, validate
from ator.errors import AtorError, NotFound
from ator.jobs import BudgetRefused, JobContext, ModelWork, WorkCall
from ator.obs.logging import get_logger
from ator.store import analyses as store
from ator.store import jobs as job_store
from ator.store import mailbox
from ator.store import webhook_outbox as webhook_store
from ator.store.analyses import Analysis, NewAnalysis
from ator.store.database import Connection, Database
from ator.store.jobs import NewJob
from ator.store.scope import Scope

__all__ = ["RUN", "Runner", "input_hash"]

log = get_logger("ator.analyses")

#: The job kind every analysis runs as.
RUN = "analyses.run"
RUN_ATTEMPTS = 3  # the 3rd failed delivery is the last; then the job is dead

KindLookup = Callable[[Scope, str], Awaitable[AnalysisKind]]
Notify = Callable[[Scope, UUID], Awaitable[None]]
#: Starts a workflow run: (scope, workflow id, input, idempotency key).
StartRun = Callable[[Scope, UUID, Any, str], Awaitable[object]]


def input_hash(kind: AnalysisKind, data: Mapping[str, Any],
               documents: list[tuple[str, int]]) -> str:
    """SHA-256 of what changes the answer: the kind, its version, the key fields (the whole
    input when the kind names none) and the documents read, as canonical JSON."""
    fields = ({k: data.get(k) for k in kind.key_fields} if kind.key_fields else dict(data))
    key = {"kind": kind.name, "version": kind.version, "fields": fields,
           "documents": sorted(documents)}
    return hashlib.sha256(jsonenc.canonical(key)).hexdigest()


def message(kind: str, target: str, *, origin: str, options: Mapping[str, Any] | None = None,
            then: list[str] | tuple[str, ...] = (), org: UUID) -> dict[str, Any]:
    """A run's queue message (the job's payload; the job carries attempt and request id)."""
    return {"kind": kind, "target": target, "origin": origin, "options": dict(options or {}),
            "then": list(then), "org": str(org)}


class Runner:
    def __init__(self, db: Database, work: ModelWork, kinds: KindLookup, notify: Notify,
                 ) -> None:
        self.db = db
        self.work = work
        self.kinds = kinds
        self.notify = notify
        self.start_run: StartRun | None = None  # set once the workflows service is known

    async def handle(self, ctx: JobContext, payload: dict[str, Any]) -> None:
        scope = ctx.scope
        name, target = str(payload["kind"]), str(payload["target"])
        options: dict[str, Any] = dict(payload.get("options") or {})
        origin = str(payload.get("origin", "api"))
        extra = {"kind": name, "target": target, "origin": origin, "attempt": ctx.attempt}
        if payload.get("org") not in (None, str(scope.org_id)):
            log.warning("analysis message names another org; ignored", extra=extra)
            return  # a chain never crosses orgs: the job's org is the truth
        if not await store.org_active(self.db, scope):
            log.info("org is not active; analysis skipped", extra=extra)
            return
        try:
            kind = await self.kinds(scope, name)
        except NotFound:  # deleted since it was queued: nothing to retry
            log.warning("analysis kind no longer exists; run dropped", extra=extra)
            return
        then = list(payload["then"]) if payload.get("then") else list(kind.then)
        log.info("analysis started", extra=extra)
        inputs = InputContext(self.db, scope)
        data = await kind.input(inputs, target, options)
        if data is None:
            log.info("nothing to analyze", extra=extra)
            await self._done(scope, ctx, target, options, then)
            return
        digest = input_hash(kind, data, inputs.documents)
        force = bool(options.get("force"))
        if not force:
            hit = await store.cached_hit(self.db, scope, kind.name, target, digest)
            if hit is not None:
                log.info("analysis cache hit", extra={**extra, "analysis_id": str(hit.id)})
                await self._done(scope, ctx, target, options, then)
                return
        new = await self._compute(scope, kind, data, target, digest, origin, ctx, extra,
                                  cacheable=not force)
        if new is None:
            return
        async with self.db.begin() as conn:
            stored = await store.save(conn, scope, new)
            if "webhook" in kind.apply:
                await self._webhook(conn, scope, stored)
            await self._chain(conn, scope, ctx, target, options, then)
            await ctx.complete(conn)
        log.info(f"{kind.name}_generated", extra={
            **extra, "analysis_id": str(stored.id), "model": stored.model,
            "verdict": stored.verdict, "cost_usd": str(stored.cost_usd)})
        if "thread_message" in kind.apply:
            await self._thread_message(scope, kind, stored)
        if "workflow" in kind.apply and kind.workflow_id is not None:
            await self._workflow(scope, kind, stored, extra)

    async def _compute(self, scope: Scope, kind: AnalysisKind, data: dict[str, Any],
                       target: str, digest: str, origin: str, ctx: JobContext,
                       extra: dict[str, Any], *, cacheable: bool) -> NewAnalysis | None:
        def record(model: str, output: dict[str, Any], verdict: Verdict, *, cost: Decimal,
                   spent: Decimal, called: bool) -> NewAnalysis:
            return NewAnalysis(kind.name, kind.version, target, digest, cacheable, model,
                               output, verdict.verdict, verdict.problems, cost, spent, origin,
                               ctx.request_id, called=called, fallback=model == "rule")

        call = WorkCall(label=kind.label, provider=kind.provider, model=kind.model,
                        prompt=render(kind.prompt, data), system=kind.system,
                        config=dict(kind.config), max_tokens=kind.max_tokens)
        try:
            result = await self.work.call(scope, call)
        except BudgetRefused as exc:
            if kind.at_limit == "refuse":
                log.warning("analysis refused at the org's budget limit",
                            extra={**extra, "reason": exc.message})
                async with self.db.begin() as conn:
                    await ctx.complete(conn)
                return None
            log.info("at the org's budget limit: the rule answers", extra=extra)
            return record("rule", kind.rule(data), Verdict("budget", None, [exc.message[:300]]),
                          cost=Decimal(0), spent=Decimal(0), called=False)

        async def exists(record_type: str, ids: list[str]) -> set[str]:
            return await store.existing_ids(self.db, scope, record_type, ids)

        verdict = await validate(result.text, kind.checker, kind.validators, input=data,
                                 exists=exists)
        if verdict.usable and verdict.output is not None:
            return record(result.model, verdict.output, verdict, cost=result.cost_usd,
                          spent=result.cost_usd, called=True)
        log.warning("model output refused by the validator: the rule answers",
                    extra={**extra, "verdict": verdict.verdict,
                           "problems": verdict.problems[:3]})
        return record("rule", kind.rule(data), verdict, cost=Decimal(0),
                      spent=result.cost_usd, called=True)

    async def _done(self, scope: Scope, ctx: JobContext, target: str,
                    options: dict[str, Any], then: list[str]) -> None:
        """End a run that stored nothing: its chain and completion commit together; with no
        chain the worker's batched completion is enough (a rerun only counts again)."""
        if then:
            async with self.db.begin() as conn:
                await self._chain(conn, scope, ctx, target, options, then)
                await ctx.complete(conn)

    async def _chain(self, conn: Connection, scope: Scope, ctx: JobContext, target: str,
                     options: dict[str, Any], then: list[str]) -> None:
        if not then:
            return
        following = {k: v for k, v in options.items() if k != "force"}
        body = message(then[0], target, origin=f"chain:{ctx.id}", options=following,
                       then=then[1:], org=scope.org_id)
        await job_store.enqueue(conn, scope, NewJob(kind=RUN, payload=body,
                                                    max_attempts=RUN_ATTEMPTS,
                                                    request_id=ctx.request_id))

    async def _webhook(self, conn: Connection, scope: Scope, a: Analysis) -> None:
        # The outbox's one writer: the event and its fan-out job, if an endpoint wants it.
        await webhook_store.emit(conn, scope.org_id, "analysis.generated",
                                 {"event": f"{a.kind}_generated", **_public(a)})

    async def _thread_message(self, scope: Scope, kind: AnalysisKind, a: Analysis) -> None:
        try:
            thread_id = UUID(a.target)
        except ValueError:
            log.warning("thread_message needs a thread as target", extra={"kind": kind.name})
            return
        _, created = await mailbox.submit(
            self.db, scope, thread_id, client_message_id=f"analysis:{a.id}",
            kind="notification",
            content={"source": kind.label, "text": jsonenc.dumps(a.output)})
        if created:
            await self.notify(scope, thread_id)


    async def _workflow(self, scope: Scope, kind: AnalysisKind, a: Analysis,
                        extra: dict[str, Any]) -> None:
        if self.start_run is None or kind.workflow_id is None:
            log.warning("no workflows service: the workflow apply step is skipped", extra=extra)
            return
        try:  # idempotent per analysis: a rerun of this step starts nothing new
            await self.start_run(scope, UUID(kind.workflow_id), a.output, f"analysis:{a.id}")
        except AtorError as exc:  # the analysis stands; the run could not start
            log.warning("could not start the kind's workflow run",
                        extra={**extra, "code": exc.code, "error": exc.message})


def _public(a: Analysis) -> dict[str, Any]:
    """An analysis as the API and webhooks show it."""
    return {"id": str(a.id), "kind": a.kind, "kind_version": a.kind_version,
            "target": a.target, "input_hash": a.input_hash, "cacheable": a.cacheable,
            "model": a.model, "output": a.output, "verdict": a.verdict,
            "problems": a.problems, "cost_usd": str(a.cost_usd),
            "spent_usd": str(a.spent_usd), "origin": a.origin, "request_id": a.request_id,
            "created_at": a.created_at.isoformat()}
