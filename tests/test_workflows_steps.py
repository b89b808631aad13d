"""The expanders and http on real PostgreSQL through the jobs worker: verify with an agent
whose output fails its schema once and passes on repair, then fails a check once and passes
on a repair; a tournament of 5 with a bye and the tie rule; a loop stopping at its cap or at
its condition; http through the egress guard (a private address and a redirect to one
refused, a secret header sent by reference); a run with no progress closed typed."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ator.engine.runtime import Ator
from ator.store.scope import Scope
from ator.testing import AnthropicWireFake, Reply
from ator.workflows import Workflows
from tests.workflow_util import org, published, recipe, settled, steps_of

MODEL = "claude-haiku-4-5"


@pytest.fixture
async def runtime(make_ator: Any) -> AsyncIterator[Ator]:
    async with make_ator(job_poll_interval=0.05, egress_allow="127.0.0.1") as ator:
        await ator.start_jobs()
        yield ator


async def _run(ator: Ator, scope: Scope, rec: dict[str, Any], input: Any = None) -> Any:
    wf = await published(ator, scope, rec)
    run, _ = await ator.service(Workflows).start(scope, wf, input or {})
    return await settled(ator, scope, run["id"])


async def test_verify_repairs_an_agent_whose_output_fails_its_schema_then_its_check(
    runtime: Ator,
) -> None:
    script = [Reply(text="a poem about the sea"),  # not JSON: the agent's own repair
              Reply(text='{"title": "Sea", "lines": 2}'),  # valid, but the check fails
              Reply(text='{"title": "Sea", "lines": 4}')]  # the verify repair passes
    async with AnthropicWireFake(script) as fake:
        scope = await org(runtime)
        await runtime.put_secret(scope, "anthropic", "sk-ant-test")
        setup = await runtime.create_setup(
            scope, name="s", provider="anthropic", model=MODEL,
            config={"api_key": "secret:anthropic", "base_url": fake.base_url})
        done = await _run(runtime, scope, recipe(
            {"id": "poem", "type": "verify", "max_repairs": 2,
             "check": "output.lines >= 4 ? true : 'write at least 4 lines'",
             "step": {"type": "agent", "setup_id": str(setup.id),
                      "prompt": "attempt = 0 ? 'Write a poem' : 'Fix it: ' & feedback",
                      "output_schema": {"type": "object", "required": ["title", "lines"],
                                        "properties": {"lines": {"type": "integer"}}}}}))
        assert done["status"] == "succeeded", done["error"]
        assert done["output"] == {"title": "Sea", "lines": 4}
        assert len(fake.requests) == 3
        assert "does not match the schema" in str(fake.requests[1].body["messages"][-1])
        assert "Fix it: write at least 4 lines" in str(fake.requests[2].body["messages"])
        steps = await steps_of(runtime, scope, done["id"])
        assert [p for p in steps if p.startswith("poem/")] == ["poem/0", "poem/1"]
        assert steps["poem"]["output"] == {"title": "Sea", "lines": 4}
        # Charged for the worst case (1 + 3 attempts), the unused attempt given back.
        assert done["steps_used"] == 3


async def test_verify_fails_when_its_repairs_run_out(runtime: Ator) -> None:
    scope = await org(runtime)
    done = await _run(runtime, scope, recipe(
        {"id": "v", "type": "verify", "max_repairs": 1, "check": "output > 10",
         "step": {"type": "transform", "expr": "attempt"}}, on_error="fail"))
    assert (done["status"], done["fail_reason"]) == ("failed", "step_failed")
    assert "did not pass the check after 1 repair" in done["error"]


async def test_a_tournament_of_five_with_a_bye(runtime: Ator) -> None:
    scope = await org(runtime)
    done = await _run(runtime, scope, recipe(
        {"id": "best", "type": "tournament", "over": "input.xs",
         "judge": {"type": "transform",
                   "expr": "left > right ? 'left' : (right > left ? 'right' : 'tie')"}}),
        {"xs": [3, 9, 1, 7, 5]})
    assert done["status"] == "succeeded", done["error"]
    assert done["output"] == {"winner": 9, "seed": 1, "rounds": 3}
    steps = await steps_of(runtime, scope, done["id"])
    matches = {p: s["input"]["seeds"] for p, s in steps.items() if p.startswith("best/")}
    # Round 0: seed 0 (the best seed of an odd field) has a bye; 1-2 and 3-4 play.
    assert matches == {"best/r0m0": [1, 2], "best/r0m1": [3, 4], "best/r1m0": [1, 3],
                       "best/r2m0": [0, 1]}
    assert done["steps_used"] == 5  # the tournament and its n - 1 = 4 matches
    events = await runtime.service(Workflows).events(scope, done["id"], limit=1000)
    rounds = [e["data"] for e in events if e["kind"] == "tournament_round"]
    assert [r["bye"] for r in rounds] == [0, 0, None]


async def test_a_tie_sends_the_better_seed_through(runtime: Ator) -> None:
    scope = await org(runtime)
    done = await _run(runtime, scope, recipe(
        {"id": "t", "type": "tournament", "over": "input.xs",
         "judge": {"type": "transform", "expr": "'tie'"}}), {"xs": ["a", "b", "c", "d"]})
    assert done["output"] == {"winner": "a", "seed": 0, "rounds": 2}


async def test_a_loop_stops_at_its_cap(runtime: Ator) -> None:
    scope = await org(runtime)
    done = await _run(runtime, scope, recipe(
        {"id": "grow", "type": "loop", "max_iterations": 5, "until": "output > 1000",
         "step": {"type": "transform", "expr": "(previous ? previous : 1) * 2"}}))
    assert done["status"] == "succeeded", done["error"]
    assert done["output"] == {"last": 32, "iterations": 5, "stopped": "cap"}
    steps = await steps_of(runtime, scope, done["id"])
    assert sorted(p for p in steps if p.startswith("grow/")) == [f"grow/{i}" for i in range(5)]


async def test_a_loop_stops_at_its_condition_and_gives_back_unused_steps(runtime: Ator) -> None:
    scope = await org(runtime)
    done = await _run(runtime, scope, recipe(
        {"id": "grow", "type": "loop", "max_iterations": 50, "until": "output >= 8",
         "step": {"type": "transform", "expr": "(previous ? previous : 1) * 2"}}))
    assert done["output"] == {"last": 8, "iterations": 3, "stopped": "until"}
    assert done["steps_used"] == 1 + 3


@contextlib.asynccontextmanager
async def _server(routes: dict[str, tuple[int, dict[str, str], bytes]]
                  ) -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A plain HTTP/1.1 server on 127.0.0.1: path → (status, headers, body); it records
    each request's headers."""
    seen: list[dict[str, str]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        lines = head.split("\r\n")
        path = lines[0].split(" ")[1]
        headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        seen.append({k.lower(): v for k, v in headers.items()} | {":path": path})
        if int(headers.get("Content-Length", headers.get("content-length", "0"))):
            await reader.readexactly(int(headers.get("Content-Length",
                                                     headers.get("content-length"))))
        status, extra, body = routes.get(path, (404, {}, b"no"))
        out = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Connection: close",
               *(f"{k}: {v}" for k, v in extra.items())]
        writer.write(("\r\n".join(out) + "\r\n\r\n").encode() + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.close()


async def test_http_to_a_private_address_is_refused_by_the_guard(runtime: Ator) -> None:
    scope = await org(runtime)
    done = await _run(runtime, scope, recipe(
        {"id": "meta", "type": "http", "url": "'http://169.254.169.254/latest/meta-data'"},
        {"id": "lan", "type": "http", "url": "'http://10.1.2.3/'"}, on_error="fail"))
    assert (done["status"], done["fail_reason"]) == ("failed", "step_failed")
    assert "refused" in done["error"] and "'meta'" in done["error"]
    step = (await steps_of(runtime, scope, done["id"]))["meta"]
    assert step["error_code"] == "egress_blocked" and step["attempt"] == 1  # not retried


async def test_http_sends_a_secret_by_reference_and_a_redirect_to_a_private_address_is_refused(
    runtime: Ator,
) -> None:
    scope = await org(runtime)
    await runtime.put_secret(scope, "svc_token", "tok-123")
    async with _server({"/ok": (200, {"Content-Type": "application/json"},
                                json.dumps({"n": 7}).encode()),
                        "/hop": (302, {"Location": "http://10.9.9.9/"}, b"")}) as (base, seen):
        done = await _run(runtime, scope, recipe(
            {"id": "get", "type": "http", "url": f"'{base}/ok'",
             "headers": {"Authorization": {"secret": "svc_token"}}},
            {"id": "sum", "type": "transform", "expr": "steps.get.body.n + 1"}))
        assert done["status"] == "succeeded", done["error"]
        assert done["output"] == 8
        assert seen[0]["authorization"] == "tok-123"
        step = (await steps_of(runtime, scope, done["id"]))["get"]
        assert "tok-123" not in json.dumps(step, default=str)
        hop = await _run(runtime, scope, recipe(
            {"id": "hop", "type": "http", "url": f"'{base}/hop'"}, on_error="fail"))
        assert hop["status"] == "failed" and "refused" in hop["error"], hop
        assert [s[":path"] for s in seen] == ["/ok", "/hop"]  # 10.9.9.9 never reached


@pytest.mark.parametrize("claim_delay", [0.0, 1.5])
async def test_a_run_with_no_progress_closes_with_a_typed_reason(
    runtime: Ator, monkeypatch: pytest.MonkeyPatch, claim_delay: float,
) -> None:
    # The run's only step never finishes: the idle timer alone must close the run, whether
    # the step's job began before the clock ran out (its body hangs) or only after (a loaded
    # machine; the 1.5 s case forces it). The old test waited for the body to begin first,
    # so a job that started after the 1 s clock waited for a body that never ran.
    from ator.workflows.steps import StepRunner
    from ator.workflows.types import Transform

    async def hang(self: Transform, attempt: Any) -> Any:
        await asyncio.Event().wait()  # never finishes (until the job is cancelled)

    handle = StepRunner.handle

    async def late(self: StepRunner, ctx: Any, payload: dict[str, Any]) -> None:
        await asyncio.sleep(claim_delay)
        await handle(self, ctx, payload)

    monkeypatch.setattr(Transform, "run", hang)
    monkeypatch.setattr(StepRunner, "handle", late)
    scope = await org(runtime)
    wf = await published(runtime, scope, recipe({"id": "a", "type": "transform", "expr": "1"},
                                                budget={"idle_s": 1}))
    run, _ = await runtime.service(Workflows).start(scope, wf, {})
    done = await settled(runtime, scope, run["id"], timeout=30)
    assert (done["status"], done["fail_reason"]) == ("failed", "no_progress")
    # Its step never finished; on a loaded machine the run may close before the first
    # tick has even created it (a reconcile job claimed after the 1 s clock ran out).
    step = (await steps_of(runtime, scope, run["id"])).get("a")
    assert step is None or step["status"] != "done", step


async def test_every_close_of_a_run_reaches_its_end_parts_once(
    runtime: Ator, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The one run-end mechanism: the event that ends a run (store/workflows.py's ENDED)
    # writes the origin's notice, the parent's wake and the `run.ended` webhook, whichever
    # writer ends it (the reconciler, a cancel, a child's cancel by its parent).
    from ator.store import webhook_outbox

    closes: list[tuple[str, str | None]] = []
    real = webhook_outbox.run_ended

    async def recorded(conn: Any, run_id: Any, kind: str, data: dict[str, Any]) -> None:
        closes.append((kind, data.get("reason")))
        await real(conn, run_id, kind, data)

    monkeypatch.setattr(webhook_outbox, "run_ended", recorded)
    scope = await org(runtime)
    ok = await _run(runtime, scope, recipe({"id": "a", "type": "transform", "expr": "1"}))
    bad = await _run(runtime, scope, recipe({"id": "a", "type": "transform", "expr": "1"},
                                            budget={"max_steps": 1},
                                            on_error="fail") | {"steps": [
        {"id": "m", "type": "map", "over": "[1..5]",
         "step": {"type": "transform", "expr": "item"}}]})
    wf = await published(runtime, scope, recipe({"id": "w", "type": "wait", "seconds": 600}))
    run, _ = await runtime.service(Workflows).start(scope, wf, {})
    await runtime.service(Workflows).cancel(scope, run["id"], "enough")
    assert (ok["status"], bad["fail_reason"]) == ("succeeded", "max_steps")
    assert closes == [("run_succeeded", None), ("run_failed", "max_steps"),
                      ("run_cancelled", "enough")]
