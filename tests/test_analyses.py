"""Analyses on real PostgreSQL, the model through the scripted provider: the hash cache
(one model call for the same input, a new one with force), validation (cleaned, rejected,
unparseable -> the rule, model `rule`, cost 0), a chain of three kinds with one request id
in every log line, a failing kind dead-lettered after 3 attempts and replayed, a daily
schedule over 3 orgs run once each in its own org context, and the org's limit answered by
the rule with no model call."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa

from ator import Ator
from ator.analyses import RUN, Analyses
from ator.context import current_ids, request_id_var
from ator.errors import ProviderError
from ator.jobs import JobKinds, JobQueue, ManualClock, Scheduler
from ator.providers.base import Usage
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.store.schema import model_calls, org_usage
from ator.store.scope import Scope
from tests.conftest import ended, wait_for_event

FAST = {"job_poll_interval": 0.05}
PRICED = {"priced-model": {"input": "1", "output": "2"}}

RISK = {
    "input": {"source": "payload"},
    "key_fields": ["customer"],
    "prompt": "Assess the risk of {{customer}}. Answer JSON.",
    "model": {"provider": "fake", "model": "scripted", "max_tokens": 200},
    "output_schema": {"type": "object", "required": ["level", "reason"],
                      "properties": {"level": {"type": "string"},
                                     "reason": {"type": "string"}}},
    "validators": [{"type": "vocabulary", "field": "level", "values": ["low", "medium", "high"],
                    "on_miss": "reject"},
                   {"type": "length", "field": "reason", "max": 20}],
    "rule": {"output": {"level": "medium", "reason": "rule"}},
}


def fake(text: str = '{"level": "High", "reason": "late payments"}', **kw: Any) -> Any:
    return {"fake": ScriptedProvider([ScriptStep(text=text, **kw)], repeat_last=True)}


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def done(ator: Ator, scope: Scope, job_id: int, state: str = "done") -> None:
    queue = ator.service(JobQueue)

    async def check() -> bool:
        return (await queue.get(scope, job_id)).state == state

    await until(check)


async def calls(ator: Ator, scope: Scope, label: str) -> int:
    rows = await ator.db.read(sa.select(sa.func.count()).select_from(model_calls).where(
        model_calls.c.org_id == scope.org_id, model_calls.c.purpose == label))
    return int(rows[0][0])


@pytest.fixture
async def runtime(make_ator: Any) -> AsyncIterator[Callable[..., Any]]:
    """`async with runtime(providers) as (ator, analyses)` with jobs running."""

    @asynccontextmanager
    async def make(providers: Any, **settings: Any) -> AsyncIterator[tuple[Ator, Analyses]]:
        async with make_ator(providers=providers, **FAST, **settings) as ator:
            await ator.start_jobs()
            yield ator, ator.service(Analyses)

    yield make


async def org(ator: Ator, **budget: Any) -> Scope:
    made = await ator.create_org(f"an-{uuid.uuid4().hex[:6]}", **budget)
    return Scope(made.id)


async def run(ator: Ator, analyses: Analyses, scope: Scope, kind: str, target: str,
              **kw: Any) -> None:
    await done(ator, scope, await analyses.trigger(scope, kind, target, **kw))


async def test_the_same_input_twice_is_one_model_call_and_force_makes_another(
        runtime: Any) -> None:
    async with runtime(fake()) as (ator, analyses):
        scope = await org(ator)
        await analyses.register(scope, "risk", RISK)
        payload = {"payload": {"customer": "acme", "noise": 1}}
        await run(ator, analyses, scope, "risk", "cust-1", options=payload)
        # Only key fields change the answer: different noise is the same input.
        await run(ator, analyses, scope, "risk", "cust-1",
                  options={"payload": {"customer": "acme", "noise": 2}})
        assert await calls(ator, scope, "analysis:risk") == 1
        stored = await analyses.records(scope, kind="risk")
        assert len(stored) == 1
        a = stored[0]
        # "High" is cleaned to the vocabulary's "high"; the reason is cut at 20.
        assert a.output == {"level": "high", "reason": "late payments"}
        assert (a.verdict, a.model, a.cacheable) == ("clean", "scripted", True)
        await run(ator, analyses, scope, "risk", "cust-1", options=payload, force=True)
        assert await calls(ator, scope, "analysis:risk") == 2
        forced = (await analyses.records(scope, kind="risk"))[0]
        assert forced.cacheable is False and forced.input_hash == a.input_hash
        # A forced hash never serves as cache: the next run hits the first analysis.
        await run(ator, analyses, scope, "risk", "cust-1", options=payload)
        assert await calls(ator, scope, "analysis:risk") == 2
        [stat] = await analyses.stats(scope)
        assert (stat["runs"], stat["model_calls"], stat["cache_hits"], stat["fallbacks"]) == (
            4, 2, 2, 0)


async def test_an_output_outside_the_vocabulary_is_rejected_and_the_rule_answers(
        runtime: Any) -> None:
    async with runtime(fake('{"level": "catastrophic", "reason": "x"}')) as (ator, analyses):
        scope = await org(ator)
        await analyses.register(scope, "risk", RISK)
        await run(ator, analyses, scope, "risk", "c", options={"payload": {"customer": "a"}})
        [a] = await analyses.records(scope)
        assert (a.model, a.cost_usd, a.verdict) == ("rule", Decimal(0), "reject")
        assert a.output == {"level": "medium", "reason": "rule"}
        assert await calls(ator, scope, "analysis:risk") == 1  # the call happened, was billed
        [stat] = await analyses.stats(scope)
        assert stat["fallback_rate"] == 1.0 and stat["flagged"] is True


async def test_a_cleaning_vocabulary_replaces_an_unknown_value_by_its_default(
        runtime: Any) -> None:
    spec = {**RISK, "validators": [{"type": "vocabulary", "field": "level",
                                    "values": ["low", "high"], "default": "low"}]}
    async with runtime(fake('{"level": "weird", "reason": "ok"}')) as (ator, analyses):
        scope = await org(ator)
        await analyses.register(scope, "risk", spec)
        await run(ator, analyses, scope, "risk", "c", options={"payload": {"customer": "a"}})
        [a] = await analyses.records(scope)
        assert (a.model, a.verdict, a.output["level"]) == ("scripted", "clean", "low")


async def test_an_unparseable_reply_runs_the_rule_at_cost_zero(runtime: Any) -> None:
    async with runtime(fake("I think the risk is high!")) as (ator, analyses):
        scope = await org(ator)
        await analyses.register(scope, "risk", RISK)
        await run(ator, analyses, scope, "risk", "c", options={"payload": {"customer": "a"}})
        [a] = await analyses.records(scope)
        assert (a.model, a.cost_usd, a.verdict) == ("rule", Decimal(0), "unparseable")


class Lines(logging.Handler):
    """Every analyses log line with the ids in its context when it was logged."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[str, dict[str, str], dict[str, Any]]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.getMessage(), current_ids(), dict(record.__dict__)))


@contextmanager
def captured() -> Iterator[Lines]:
    logger = logging.getLogger("ator.analyses")
    handler, level = Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _step(name: str, source: dict[str, Any]) -> dict[str, Any]:
    return {"input": source, "model": {"provider": "fake", "model": "scripted"},
            "prompt": name + ": {{input}}",
            "output_schema": {"type": "object", "required": ["level"]},
            "rule": {"output": {"level": "low"}}}


async def test_a_chain_of_three_kinds_runs_in_order_with_one_request_id(
        runtime: Any) -> None:
    async with runtime(fake('{"level": "high"}')) as (ator, analyses):
        scope = await org(ator)
        await analyses.register(scope, "first", _step("first", {"source": "payload"}))
        await analyses.register(scope, "second", _step("second", {"source": "analysis",
                                                                  "kind": "first"}))
        await analyses.register(scope, "third", _step("third", {"source": "analysis",
                                                                "kind": "second"}))
        with captured() as log:
            token = request_id_var.set("req-chain-1")
            try:
                job = await analyses.trigger(scope, "first", "t", then=["second", "third"],
                                             options={"payload": {"x": 1}})
            finally:
                request_id_var.reset(token)
            await done(ator, scope, job)

            async def three() -> bool:
                return len(await analyses.records(scope)) == 3

            await until(three)
        stored = list(reversed(await analyses.records(scope)))
        assert [a.kind for a in stored] == ["first", "second", "third"]
        assert {a.request_id for a in stored} == {"req-chain-1"}
        assert stored[1].origin.startswith("chain:")
        ours = [(msg, ids) for msg, ids, _ in log.lines
                if ids.get("org_id") == str(scope.org_id)]
        assert len(ours) >= 6
        assert {ids.get("request_id") for _, ids in ours} == {"req-chain-1"}
        assert [m for m, _ in ours if m.endswith("_generated")] == [
            "first_generated", "second_generated", "third_generated"]


async def test_a_failing_kind_dead_letters_after_three_attempts_and_replays(
        runtime: Any) -> None:
    broken = ProviderError("upstream is down", kind="server_error", retryable=True)
    providers = {"fake": ScriptedProvider([ScriptStep(error=broken)], repeat_last=True)}
    async with runtime(providers) as (ator, analyses):
        scope = await org(ator)
        await analyses.register(scope, "risk", RISK)
        job = await analyses.trigger(scope, "risk", "c",
                                     options={"payload": {"customer": "a"}})
        await done(ator, scope, job, "dead")
        row = await ator.service(JobQueue).get(scope, job)
        assert row.attempt == 3 and "upstream is down" in (row.last_error or "")
        assert await analyses.records(scope) == []
        # The provider recovers; the replayed job runs with fresh attempts.
        ator.providers.register("fake", ScriptedProvider(
            [ScriptStep(text='{"level": "low", "reason": "fine"}')]))
        await ator.service(JobQueue).replay(scope, job)
        await done(ator, scope, job)
        [a] = await analyses.records(scope)
        assert (a.model, a.output["level"]) == ("scripted", "low")


async def test_a_daily_schedule_over_three_orgs_runs_each_once_in_its_own_org(
        runtime: Any) -> None:
    async with runtime(fake('{"level": "low", "reason": "daily"}')) as (ator, analyses):
        orgs = [await org(ator) for _ in range(3)]
        for scope in orgs:
            await analyses.register(scope, "risk", RISK)
            await analyses.schedule(scope, "risk", target="portfolio", cron="0 6 * * *",
                                    options={"payload": {"customer": str(scope.org_id)}})
        schedules = await ator.service(Analyses).schedules.list(orgs[0])
        first = schedules[0].next_tick
        # The scheduler was down for three daily ticks: the missed run is recovered once.
        clock = ManualClock(first + timedelta(days=2, hours=1))
        scheduler = Scheduler(ator.db, ator.service(JobKinds), clock=clock)
        with captured() as log:
            await scheduler.tick()

            async def all_ran() -> bool:
                found = [await analyses.records(s) for s in orgs]
                return all(len(f) == 1 for f in found)

            await until(all_ran)
            await scheduler.tick()  # nothing is due any more
        for scope in orgs:
            [a] = await analyses.records(scope)
            assert (a.origin, a.target) == ("schedule", "portfolio")
            lines = [ids for msg, ids, _ in log.lines if msg == "risk_generated"
                     and ids.get("org_id") == str(scope.org_id)]
            assert len(lines) == 1
        counts = await ator.db.read(sa.text(
            "SELECT org_id, count(*) AS n FROM jobs WHERE kind = :k AND org_id = ANY(:orgs) "
            "GROUP BY org_id"), {"k": RUN, "orgs": [s.org_id for s in orgs]})
        assert sorted(r.n for r in counts) == [1, 1, 1]


async def test_a_suspended_org_is_skipped(runtime: Any) -> None:
    async with runtime(fake()) as (ator, analyses):
        scope = await org(ator)
        await analyses.register(scope, "risk", RISK)
        await ator.db.write(sa.text("UPDATE orgs SET settings = '{\"suspended\": true}' "
                                    "WHERE id = :id"), {"id": scope.org_id})
        await run(ator, analyses, scope, "risk", "c", options={"payload": {"customer": "a"}})
        assert await analyses.records(scope) == []


async def test_at_the_limit_a_falling_back_kind_records_the_rule_and_no_model_call(
        runtime: Any) -> None:
    spec = {**RISK, "model": {"provider": "fake", "model": "priced-model",
                              "max_tokens": 1000}, "at_limit": "rule"}
    refusing = {**spec, "at_limit": "refuse"}
    async with runtime(fake(usage=Usage(input_tokens=10, output_tokens=5)),
                       prices=PRICED) as (ator, analyses):
        scope = await org(ator, monthly_budget_usd=Decimal("0.001"))  # < the $0.002 worst case
        await analyses.register(scope, "risk", spec)
        await analyses.register(scope, "strict", refusing)
        await run(ator, analyses, scope, "risk", "c", options={"payload": {"customer": "a"}})
        [a] = await analyses.records(scope)
        assert (a.model, a.cost_usd, a.verdict) == ("rule", Decimal(0), "budget")
        assert a.output == {"level": "medium", "reason": "rule"}
        await run(ator, analyses, scope, "strict", "c",
                  options={"payload": {"customer": "a"}})
        assert len(await analyses.records(scope)) == 1  # refused: nothing stored
        rows = await ator.db.read(sa.select(model_calls).where(
            model_calls.c.org_id == scope.org_id))
        assert rows == []
        spent = await ator.db.read(sa.select(org_usage.c.cost_usd, org_usage.c.reserved_usd)
                                   .where(org_usage.c.org_id == scope.org_id))
        assert all(r.cost_usd == 0 and r.reserved_usd == 0 for r in spent)


async def test_a_turn_end_triggers_the_kinds_that_ask_for_it(runtime: Any) -> None:
    providers = {**fake('{"level": "low", "reason": "chat"}'),
                 "chat": ScriptedProvider([ScriptStep(text="hello back")], repeat_last=True)}
    async with runtime(providers) as (ator, analyses):
        scope = await org(ator)
        spec = {**RISK, "input": {"source": "thread", "last": 10}, "key_fields": [],
                "triggers": ["turn_ended"], "apply": ["record", "thread_message"]}
        await analyses.register(scope, "mood", spec)
        setup = await ator.create_setup(scope, name="s", provider="chat", model="scripted")
        thread = await ator.create_thread(scope, setup.id)
        await ator.submit(scope, thread.id, "hi")

        async def analysed() -> bool:
            return bool(await analyses.records(scope, kind="mood"))

        await until(analysed)
        [a] = await analyses.records(scope, kind="mood")
        assert (a.target, a.origin, a.output["level"]) == (str(thread.id), "turn_ended", "low")
        # The result reaches the thread once, as data; the turn it wakes was started by no
        # person's message, so it triggers no second analysis (no loop).
        note = await wait_for_event(ator, scope, thread.id,
                                    lambda e: e.kind == "notification")
        assert note.data["source"] == "analysis:mood"
        assert json.loads(note.data["text"]) == a.output
        after = await wait_for_event(ator, scope, thread.id, ended, after_seq=note.seq)
        queue = ator.service(JobQueue)

        async def settled() -> bool:
            counts = await queue.counts(scope, RUN)
            return counts.get("queued", 0) + counts.get("running", 0) == 0

        await until(settled)
        assert after.seq > note.seq
        assert len(await analyses.records(scope, kind="mood")) == 1


async def test_apply_workflow_starts_one_run_with_the_output_as_input(runtime: Any) -> None:
    from ator.workflows import Workflows

    waiting = {"schema": "ator.workflow/v1",
               "steps": [{"id": "w", "type": "wait", "seconds": 3600}]}
    async with runtime(fake('{"level": "low", "reason": "go"}')) as (ator, analyses):
        scope = await org(ator)
        workflows = ator.service(Workflows)
        wf = await workflows.create(scope, "after-risk")
        await workflows.publish(scope, wf["id"], waiting)
        spec = {**RISK, "apply": ["record", "workflow"], "workflow_id": str(wf["id"])}
        await analyses.register(scope, "risk", spec)
        await run(ator, analyses, scope, "risk", "c", options={"payload": {"customer": "a"}})
        [a] = await analyses.records(scope)

        async def started() -> bool:  # after the analysis committed
            return bool(await workflows.runs(scope, workflow_id=wf["id"]))

        await until(started)
        runs = await workflows.runs(scope, workflow_id=wf["id"])
        assert len(runs) == 1
        assert runs[0]["input"] == a.output and runs[0]["idempotency_key"] == f"analysis:{a.id}"


SUMMARY = {
    "input": {"source": "document"},
    "prompt": "Summarize {{title}}: {{text}}. Answer JSON.",
    "model": {"provider": "fake", "model": "scripted", "max_tokens": 200},
    "output_schema": {"type": "object", "required": ["level", "reason"]},
    "rule": {"output": {"level": "medium", "reason": "rule"}},
}


async def test_a_documents_version_is_in_the_hash_so_a_new_version_is_a_new_analysis(
        runtime: Any) -> None:
    from ator.knowledge.service import Knowledge

    async with runtime(fake()) as (ator, analyses):
        scope = await org(ator)
        await analyses.register(scope, "doc_summary", SUMMARY)
        docs = ator.service(Knowledge)
        doc = await docs.create(scope, title="Handbook", body="Refunds take 5 days.")
        target = str(doc.id)
        await run(ator, analyses, scope, "doc_summary", target)
        await run(ator, analyses, scope, "doc_summary", target)  # the same version: cached
        assert await calls(ator, scope, "analysis:doc_summary") == 1
        await docs.update(scope, doc.id, body="Refunds take 10 days.")
        await run(ator, analyses, scope, "doc_summary", target)
        assert await calls(ator, scope, "analysis:doc_summary") == 2
        first, second = sorted(await analyses.records(scope, kind="doc_summary"),
                               key=lambda a: a.created_at)
        assert first.input_hash != second.input_hash
        # Another org's document is nothing to analyze there (no call, no record).
        other = await org(ator)
        await analyses.register(other, "doc_summary", SUMMARY)
        await run(ator, analyses, other, "doc_summary", target)
        assert await calls(ator, other, "analysis:doc_summary") == 0
        assert await analyses.records(other, kind="doc_summary") == []
