"""Workflows on real PostgreSQL through the jobs worker in this process: a 1,000-item map of
transforms completed once per item, switch, wait, budgets, failure pausing the run,
idempotent start under a race, and lifecycle races that never reopen a terminal run."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ator.engine.runtime import Ator
from ator.errors import Conflict, NotFound, ValidationFailed
from ator.jobs import JobQueue
from ator.store import workflows as run_store
from ator.workflows import Workflows
from tests.workflow_util import org, published, recipe, settled


@pytest.fixture
async def runtime(make_ator: Any) -> AsyncIterator[Ator]:
    async with make_ator(job_poll_interval=0.05, job_concurrency=40) as ator:
        await ator.start_jobs()
        yield ator


async def test_a_1000_item_map_of_transforms_completes_each_item_exactly_once(
    runtime: Ator,
) -> None:
    scope = await org(runtime)
    flows = runtime.service(Workflows)
    wf = await published(runtime, scope, recipe(
        {"id": "each", "type": "map", "over": "input.items", "concurrency": 50,
         "step": {"type": "transform", "expr": "item * 2 + index * 0"}},
        {"id": "total", "type": "transform", "expr": "$sum(steps.each)"},
        input={"type": "object", "required": ["items"],
               "properties": {"items": {"type": "array", "items": {"type": "integer"}}}},
        budget={"max_steps": 1_100}))
    run, created = await flows.start(scope, wf, {"items": list(range(1000))})
    assert created
    done = await settled(runtime, scope, run["id"], timeout=180)
    assert done["status"] == "succeeded", done["error"]
    assert done["output"] == 2 * sum(range(1000))
    assert done["steps_used"] == 1 + 1000 + 1
    rows = await runtime.db.pool.fetch(
        "SELECT s.path, count(a.*) AS attempts, count(a.*) FILTER (WHERE a.outcome = 'done') AS ok"
        "  FROM workflow_steps s LEFT JOIN workflow_attempts a ON a.step_id = s.id"
        " WHERE s.run_id = $1 AND s.parent_id IS NOT NULL GROUP BY s.path", run["id"])
    assert len(rows) == 1000
    assert all(r["attempts"] == 1 and r["ok"] == 1 for r in rows)
    completions = await runtime.db.pool.fetchval(
        "SELECT count(*) FROM workflow_events WHERE run_id = $1 AND kind = 'step_done'"
        " AND data->>'step' LIKE 'each/%'", run["id"])
    assert completions == 1000
    seqs = [e["seq"] for e in await flows.events(scope, run["id"], limit=10_000)]
    assert seqs == list(range(1, len(seqs) + 1))  # per-run seq, gapless


async def test_a_malformed_recipe_names_the_json_pointer(runtime: Ator) -> None:
    scope = await org(runtime)
    flows = runtime.service(Workflows)
    workflow = await flows.create(scope, "bad")
    with pytest.raises(ValidationFailed) as caught:
        await flows.publish(scope, workflow["id"], recipe(
            {"id": "ok", "type": "transform", "expr": "1"},
            {"id": "m", "type": "map", "over": "input.xs", "step": {"type": "transform",
                                                                  "expr": "item +"}}))
    assert caught.value.code == "recipe_invalid"
    assert [e["pointer"] for e in caught.value.errors] == ["/steps/1/step/expr"]
    with pytest.raises(ValidationFailed) as caught:
        await flows.publish(scope, workflow["id"], recipe(
            {"id": "a", "type": "transform", "expr": 5}, budget={"max_steps": 10**9}))
    pointers = {e["pointer"] for e in caught.value.errors}
    assert "/steps/0/expr" in pointers and "/budget/max_steps" not in pointers  # schema first
    with pytest.raises(NotFound):
        await flows.version(scope, workflow["id"], None)  # nothing was published


async def test_input_is_validated_before_anything_is_written(runtime: Ator) -> None:
    scope = await org(runtime)
    flows = runtime.service(Workflows)
    wf = await published(runtime, scope, recipe(
        {"id": "a", "type": "transform", "expr": "input.n"},
        input={"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}))
    with pytest.raises(ValidationFailed) as caught:
        await flows.start(scope, wf, {"n": "x"}, key="k1")
    assert caught.value.code == "input_invalid"
    assert caught.value.errors[0]["pointer"] == "/n"
    assert await flows.runs(scope, workflow_id=wf) == []


async def test_idempotent_start_raced_returns_one_run(runtime: Ator) -> None:
    scope = await org(runtime)
    flows = runtime.service(Workflows)
    wf = await published(runtime, scope, recipe({"id": "a", "type": "transform",
                                                 "expr": "input.n + 1"}))
    results = await asyncio.gather(*(flows.start(scope, wf, {"n": 1}, key="same")
                                     for _ in range(10)))
    assert len({r["id"] for r, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    done = await settled(runtime, scope, results[0][0]["id"])
    assert done["output"] == 2
    other = await published(runtime, scope, recipe({"id": "a", "type": "transform",
                                                    "expr": "1"}))
    with pytest.raises(Conflict):
        await flows.start(scope, other, {}, key="same")


async def test_a_run_pins_its_version(runtime: Ator) -> None:
    scope = await org(runtime)
    flows = runtime.service(Workflows)
    wf = await published(runtime, scope, recipe(
        {"id": "w", "type": "wait", "seconds": 0.3},
        {"id": "a", "type": "transform", "expr": "'v1'"}))
    run, _ = await flows.start(scope, wf, {})
    await flows.publish(scope, wf, recipe({"id": "a", "type": "transform", "expr": "'v2'"}))
    done = await settled(runtime, scope, run["id"])
    assert (done["version"], done["output"]) == (1, "v1")
    second, _ = await flows.start(scope, wf, {})
    assert (await settled(runtime, scope, second["id"]))["output"] == "v2"


async def test_switch_runs_one_branch_and_skips_the_others(runtime: Ator) -> None:
    scope = await org(runtime)
    flows = runtime.service(Workflows)
    wf = await published(runtime, scope, recipe(
        {"id": "pick", "type": "switch", "cases": [
            {"when": "input.n > 10", "step": {"type": "transform", "expr": "'big'"}},
            {"when": "input.n > 5", "step": {"type": "transform", "expr": "'medium'"}}],
         "default": {"type": "transform", "expr": "'small'"}},
        {"id": "say", "type": "transform", "expr": "steps.pick & '!'"}))
    for n, want in ((7, "medium!"), (1, "small!"), (50, "big!")):
        run, _ = await flows.start(scope, wf, {"n": n})
        done = await settled(runtime, scope, run["id"])
        assert done["output"] == want
    statuses = sorted((s["path"], s["status"]) for s in await flows.steps(scope, run["id"]))
    assert statuses == [("pick", "done"), ("pick/0", "done"), ("pick/1", "skipped"),
                        ("pick/default", "skipped"), ("say", "done")]


async def test_an_expander_over_max_steps_fails_before_creating_anything(
    runtime: Ator,
) -> None:
    scope = await org(runtime)
    flows = runtime.service(Workflows)
    wf = await published(runtime, scope, recipe(
        {"id": "first", "type": "transform", "expr": "1"},
        {"id": "each", "type": "map", "over": "[1..20]",
         "step": {"type": "transform", "expr": "item"}},
        budget={"max_steps": 20}))
    run, _ = await flows.start(scope, wf, {})
    done = await settled(runtime, scope, run["id"])
    assert (done["status"], done["fail_reason"]) == ("failed", "max_steps")
    assert done["steps_used"] == 1
    assert [s["path"] for s in await flows.steps(scope, run["id"])] == ["first"]


async def test_the_wall_clock_budget_ends_a_run(runtime: Ator) -> None:
    scope = await org(runtime)
    flows = runtime.service(Workflows)
    wf = await published(runtime, scope, recipe(
        {"id": "w", "type": "wait", "seconds": 3600}, budget={"wall_clock_s": 0.5}))
    run, _ = await flows.start(scope, wf, {})
    done = await settled(runtime, scope, run["id"], timeout=20)
    assert (done["status"], done["fail_reason"]) == ("failed", "wall_clock")


async def test_a_failed_step_pauses_the_run_naming_it_and_resume_retries_it(
    runtime: Ator,
) -> None:
    scope = await org(runtime)
    flows = runtime.service(Workflows)
    # `$number` of a non-numeric string fails; after the resume the input is the same, so the
    # step fails again: the run pauses again, naming the step each time.
    wf = await published(runtime, scope, recipe(
        {"id": "parse", "type": "transform", "expr": "$number(input.s)"}))
    run, _ = await flows.start(scope, wf, {"s": "nope"})
    paused = await settled(runtime, scope, run["id"], until={"paused"})
    assert paused["pause_reason"] == "step_failed:parse"
    assert "parse" in paused["error"]
    await flows.resume(scope, run["id"])
    again = await settled(runtime, scope, run["id"], until={"paused"})
    assert again["pause_reason"] == "step_failed:parse"
    attempts = await runtime.db.pool.fetchval(
        "SELECT count(*) FROM workflow_attempts a JOIN workflow_steps s ON s.id = a.step_id"
        " WHERE s.run_id = $1", run["id"])
    assert attempts == 2
    failing = await flows.publish(scope, wf, recipe(
        {"id": "parse", "type": "transform", "expr": "$number(input.s)", "on_error": "fail"}))
    assert failing["version"] == 2
    run2, _ = await flows.start(scope, wf, {"s": "nope"})
    done = await settled(runtime, scope, run2["id"])
    assert (done["status"], done["fail_reason"]) == ("failed", "step_failed")


async def test_lifecycle_races_never_reopen_a_terminal_run(runtime: Ator) -> None:
    scope = await org(runtime)
    flows = runtime.service(Workflows)
    wf = await published(runtime, scope, recipe(
        {"id": "each", "type": "map", "over": "[1..200]", "concurrency": 5,
         "step": {"type": "transform", "expr": "item"}}))
    for _ in range(5):
        run, _ = await flows.start(scope, wf, {})

        async def poke(action: str, run_id: Any = run["id"]) -> None:
            with contextlib.suppress(Conflict):
                await getattr(flows, action)(scope, run_id)

        await asyncio.gather(*(poke(a) for a in ["pause", "resume"] * 20 + ["cancel"]
                               + ["resume", "pause"] * 20))
        final = await flows.run(scope, run["id"])
        assert final["status"] == "cancelled"
        assert final["cancel_reason"] == "user" and final["pause_reason"] in (None, "user")
        for action in ("resume", "pause", "cancel"):
            with pytest.raises(Conflict):
                await getattr(flows, action)(scope, run["id"])
        assert (await flows.run(scope, run["id"]))["status"] == "cancelled"


async def test_a_pause_holds_new_steps_and_resume_finishes_the_run(runtime: Ator) -> None:
    scope = await org(runtime)
    flows = runtime.service(Workflows)
    wf = await published(runtime, scope, recipe(
        {"id": "each", "type": "map", "over": "[1..300]", "concurrency": 3,
         "step": {"type": "transform", "expr": "item"}}))
    run, _ = await flows.start(scope, wf, {})
    await flows.pause(scope, run["id"])
    paused = await flows.run(scope, run["id"])
    assert paused["status"] == "paused"
    await flows.resume(scope, run["id"])
    done = await settled(runtime, scope, run["id"], timeout=120)
    assert done["status"] == "succeeded"
    assert done["output"] == list(range(1, 301))


async def test_another_orgs_run_is_not_found(runtime: Ator) -> None:
    scope, stranger = await org(runtime), await org(runtime)
    flows = runtime.service(Workflows)
    wf = await published(runtime, scope, recipe({"id": "a", "type": "transform",
                                                 "expr": "1"}))
    run, _ = await flows.start(scope, wf, {})
    for call in (flows.run(stranger, run["id"]), flows.steps(stranger, run["id"]),
                 flows.events(stranger, run["id"]), flows.cancel(stranger, run["id"]),
                 flows.get(stranger, wf), flows.start(stranger, wf, {})):
        with pytest.raises(NotFound):
            await call


async def test_a_runaway_expression_is_cut_off_and_pauses_the_run(make_ator: Any) -> None:
    async with make_ator(job_poll_interval=0.05, workflow_expr_timeout_ms=200) as ator:
        await ator.start_jobs()
        scope = await org(ator)
        flows = ator.service(Workflows)
        wf = await published(ator, scope, recipe(
            {"id": "spin", "type": "transform",
             "expr": "($f := function($n){ $f($n + 1) }; $f(1))"}))
        started = time.monotonic()
        run, _ = await flows.start(scope, wf, {})
        paused = await settled(ator, scope, run["id"], until={"paused"}, timeout=30)
        assert time.monotonic() - started < 20
        assert paused["pause_reason"] == "step_failed:spin"
        assert "timeout" in paused["error"].lower() or "depth" in paused["error"].lower()


async def test_a_map_whose_list_is_over_the_value_cap_pauses_naming_it(make_ator: Any) -> None:
    async with make_ator(job_poll_interval=0.05, workflow_value_bytes=50_000) as ator:
        await ator.start_jobs()
        scope = await org(ator)
        flows = ator.service(Workflows)
        wf = await published(ator, scope, recipe(
            {"id": "each", "type": "map", "over": "[1..10]",
             "step": {"type": "transform", "expr": "$pad('', 10000, 'x')"}}))
        run, _ = await flows.start(scope, wf, {})
        paused = await settled(ator, scope, run["id"], until={"paused"})
        assert paused["pause_reason"] == "step_failed:each"
        assert "above the cap" in paused["error"]


async def test_a_step_with_a_stored_output_never_runs_again(runtime: Ator) -> None:
    scope = await org(runtime)
    flows = runtime.service(Workflows)
    wf = await published(runtime, scope, recipe({"id": "a", "type": "transform",
                                                 "expr": "input.n * 3"}))
    run, _ = await flows.start(scope, wf, {"n": 2})
    assert (await settled(runtime, scope, run["id"]))["output"] == 6
    step = (await flows.steps(scope, run["id"]))[0]
    # A duplicate delivery of the step's job (as a rescue would make) claims nothing.
    queue = runtime.service(JobQueue)
    job = await queue.enqueue(scope, "workflow.step", {"run_id": str(run["id"]),
                                                       "step_id": str(step["id"])})
    assert job is not None
    deadline = time.monotonic() + 20
    while (await queue.get(scope, job)).state != "done":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    again = await flows.step(scope, run["id"], step["id"])
    assert (again["attempt"], again["output"]) == (1, 6)


async def test_a_pause_expires_into_a_cancel_with_its_own_reason(make_ator: Any) -> None:
    async with make_ator(job_poll_interval=0.05, workflow_pause_ttl=0.5) as ator:
        await ator.start_jobs()
        scope = await org(ator)
        flows = ator.service(Workflows)
        wf = await published(ator, scope, recipe({"id": "w", "type": "wait", "seconds": 3600}))
        run, _ = await flows.start(scope, wf, {})
        await flows.pause(scope, run["id"], "lunch")
        done = await settled(ator, scope, run["id"], timeout=20)
        assert (done["status"], done["cancel_reason"], done["pause_reason"]) == (
            "cancelled", "pause_expired", "lunch")


async def test_a_reconciler_waits_for_another_holder_of_the_runs_lease(make_ator: Any) -> None:
    async with make_ator(job_poll_interval=0.05) as ator:
        scope = await org(ator)
        flows = ator.service(Workflows)
        wf = await published(ator, scope, recipe({"id": "a", "type": "transform",
                                                  "expr": "1"}))
        run, _ = await flows.start(scope, wf, {})  # its reconcile job waits: no worker yet
        # Another reconciler (a rescued duplicate, say) holds the run for a second.
        assert await run_store.take_lease(ator.db, scope, run["id"], "intruder", 1.0) is None
        held_until = await ator.db.pool.fetchval(
            "SELECT lease_until FROM workflow_runs WHERE id = $1", run["id"])
        await ator.start_jobs()
        assert (await settled(ator, scope, run["id"]))["status"] == "succeeded"
        first_step = await ator.db.pool.fetchval(
            "SELECT min(created_at) FROM workflow_steps WHERE run_id = $1", run["id"])
        assert first_step >= held_until  # nothing was written beside the other holder
        attempts = await ator.db.pool.fetchval(
            "SELECT max(attempt) FROM jobs WHERE kind = 'workflow.reconcile'"
            " AND payload->>'run_id' = $1", str(run["id"]))
        assert attempts >= 2  # the first attempt found the lease held and retried


async def test_a_step_that_keeps_failing_pauses_the_run_when_its_attempts_run_out(
    runtime: Ator, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ator.workflows.types import Transform

    calls: list[int] = []
    real = Transform.run

    async def flaky(self: Transform, attempt: Any) -> Any:
        calls.append(attempt.step.attempt)
        if attempt.step.path == "boom":
            raise OSError("the disk is on fire")
        return await real(self, attempt)

    monkeypatch.setattr(Transform, "run", flaky)
    scope = await org(runtime)
    flows = runtime.service(Workflows)
    wf = await published(runtime, scope, recipe({"id": "boom", "type": "transform",
                                                 "expr": "1"}))
    run, _ = await flows.start(scope, wf, {})
    paused = await settled(runtime, scope, run["id"], until={"paused"}, timeout=60)
    assert paused["pause_reason"] == "step_failed:boom"
    assert "the disk is on fire" in paused["error"] and "after 5 attempts" in paused["error"]
    assert calls == [1, 2, 3, 4, 5]
