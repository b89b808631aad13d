"""A workflow run's socket room on a real server (uvicorn on loopback, python-socketio
clients over WebSocket, real PostgreSQL, the jobs worker in this process): `join {run_id}`
after an ownership check (another org's run is `not_found`), the run's events replayed
from `after_seq` then live, each exactly once and in seq order, by the same feed code as a
thread's room; rejoining from a cursor gets exactly what came after it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ator import Ator, Scope
from ator.api.app import create_app
from ator.workflows import RunEvents, Workflows
from tests.realtime_util import Client, member_key, serve

MAP = {"schema": "ator.workflow/v1", "steps": [
    {"id": "gate", "type": "wait", "seconds": 1},
    {"id": "each", "type": "map", "over": "[1..200]", "concurrency": 20,
     "step": {"type": "transform", "expr": "item * 2"}},
    {"id": "total", "type": "transform", "expr": "$sum(steps.each)"}],
    "budget": {"max_steps": 400}}


@pytest.fixture
async def server(make_ator: Any) -> AsyncIterator[tuple[str, Ator]]:
    async with make_ator(rate_limit_per_minute=0, job_poll_interval=0.05) as runtime:
        await runtime.start_jobs()
        app = create_app(runtime.settings, runtime=runtime)
        app.state.ator = runtime
        app.state.sockets.attach(runtime)
        try:
            async with serve(app) as base:
                yield base, runtime
        finally:
            await app.state.sockets.close()


async def a_run(ator: Ator) -> tuple[Scope, Any]:
    org = await ator.create_org(f"runs-{uuid.uuid4().hex[:6]}")
    scope = Scope(org.id)
    flows = ator.service(Workflows)
    wf = await flows.create(scope, "fan")
    await flows.publish(scope, wf["id"], MAP)
    run, _ = await flows.start(scope, wf["id"], {})
    return scope, run


def ended(frames: list[dict[str, Any]]) -> bool:
    return any(f["type"] in ("run_succeeded", "run_failed", "run_cancelled") for f in frames)


async def test_a_runs_room_replays_then_follows_it_live_exactly_once(server: Any) -> None:
    base, ator = server
    scope, run = await a_run(ator)
    _, stranger_run = await a_run(ator)
    watcher = Client()
    await watcher.connect(base, await member_key(ator, scope))
    try:
        for payload in ({"run_id": str(stranger_run["id"])}, {"run_id": str(uuid.uuid4())}):
            refused = await watcher.call("join", **payload)
            assert refused["ok"] is False and refused["error"]["code"] == "not_found"
        bad = await watcher.call("join", run_id="nope")
        assert bad["error"]["code"] == "invalid_command"
        joined = await watcher.call("join", run_id=str(run["id"]), after_seq=0)
        assert joined["ok"] and joined["room"] == f"run:{run['id']}"
        frames = await watcher.until(ended, timeout=120)
        seqs = [f["seq"] for f in frames]
        assert seqs == list(range(1, len(seqs) + 1))  # replayed then live: no gap, no twice
        stored = await ator.service(Workflows).events(scope, run["id"], limit=10_000)
        assert [(f["seq"], f["type"]) for f in frames] == [(e["seq"], e["kind"]) for e in stored]
        assert all(f["data"]["run_id"] == str(run["id"]) for f in frames)
        done = [f for f in frames if f["type"] == "step_done"
                and str(f["data"]["data"].get("step", "")).startswith("each/")]
        assert len(done) == 200
        assert not [f for f in frames if f["data"]["run_id"] == str(stranger_run["id"])]
        # Rejoining from a cursor: exactly what came after it.
        cut = seqs[len(seqs) // 2]
        again = Client()
        await again.connect(base, await member_key(ator, scope))
        try:
            assert (await again.call("join", run_id=str(run["id"]), after_seq=cut))["ok"]
            tail = await again.until(lambda fs: bool(fs) and fs[-1]["seq"] == seqs[-1])
            assert [f["seq"] for f in tail] == seqs[seqs.index(cut) + 1:]
            left = await again.call("leave", run_id=str(run["id"]))
            assert left == {"ok": True, "run_id": str(run["id"]), "left": True}
        finally:
            await again.sio.disconnect()
    finally:
        await watcher.sio.disconnect()


async def test_a_readers_wake_reads_every_commit_since_in_one_batch(make_ator: Any) -> None:
    """Many commits while a reader is busy become one read: 40 pause/resume commits (one
    event each) made while the reader holds its first batch come as one batch, in order."""
    async with make_ator(job_poll_interval=0.05) as ator:
        org = await ator.create_org(f"runs-{uuid.uuid4().hex[:6]}")
        scope = Scope(org.id)
        flows = ator.service(Workflows)
        wf = await flows.create(scope, "slow")
        await flows.publish(scope, wf["id"], {"schema": "ator.workflow/v1", "steps": [
            {"id": "w", "type": "wait", "seconds": 3600}]})
        run, _ = await flows.start(scope, wf["id"], {})
        events = ator.service(RunEvents)
        reader = events.follow(scope, run["id"], after_seq=0, recheck=30)
        try:
            first = await anext(reader)
            assert first is not None and [r["kind"] for r in first] == ["run_started"]
            for _ in range(20):  # the reader is not reading: these pile up
                await flows.pause(scope, run["id"])
                await flows.resume(scope, run["id"])
            batch = await anext(reader)
            assert batch is not None
            assert [r["kind"] for r in batch] == ["run_paused", "run_resumed"] * 20
            assert [r["seq"] for r in batch] == list(range(2, 42))
        finally:
            await reader.aclose()
            await flows.cancel(scope, run["id"])
