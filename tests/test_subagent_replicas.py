"""Subagents across replicas (two processes sharing PostgreSQL and Redis, or a subprocess):
the stop cascade, racing notifications, a child lost with its replica."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from ator.providers.base import ModelRequest
from ator.store import tree as tree_store
from ator.store import turns as turn_store
from tests.conftest import REDIS_URL, new_thread, wait_for_event
from tests.subagent_agents import Agents, Reply, results_in, spawned_tool_results


def _spawn(title: str, task: str) -> tuple[str, dict[str, Any]]:
    return ("agent_spawn", {"title": title, "task": task})


async def _spawned_ids(ator: Any, scope: Any, thread_id: uuid.UUID, n: int) -> list[uuid.UUID]:
    """The ids of the children the thread's first step spawned (waits for that step)."""
    event = await wait_for_event(ator, scope, thread_id, lambda e: e.kind == "tool_results")
    ids = [uuid.UUID(json.loads(r["content"])["id"]) for r in event.data["results"]]
    assert len(ids) == n
    return ids


async def test_stop_on_the_root_posted_to_the_other_replica_cancels_the_whole_tree(
    make_ator, tmp_path: Path,
) -> None:
    def parent(request: ModelRequest) -> Reply:
        if spawned_tool_results(request):
            return Reply(hang=True)
        return Reply(calls=[_spawn("c1", "child"), _spawn("c2", "child")])

    def child(task: str, request: ModelRequest) -> Reply:
        if task == "grandchild":
            return Reply(hang=True)
        if spawned_tool_results(request):
            return Reply(hang=True)
        return Reply(calls=[_spawn("g", "grandchild")])

    prefix = f"ator-test-sub-{os.getpid()}-{id(tmp_path)}:"
    agents = Agents(parent, child)
    async with make_ator(providers={"agents": agents}, redis_url=REDIS_URL,
                         redis_prefix=prefix) as a, \
            make_ator(providers={"agents": agents}, redis_url=REDIS_URL,
                      redis_prefix=prefix) as b:
        scope, root = await new_thread(a, "agents")
        await a.submit(scope, root.id, "fan out twice")
        children = await _spawned_ids(a, scope, root.id, 2)
        grandchildren = [g for c in children for g in await _spawned_ids(a, scope, c, 1)]
        for g in grandchildren:
            await wait_for_event(a, scope, g, lambda e: e.kind == "turn_started")
        tree = await a.tree(scope, root.id)
        assert len(tree) == 5 and all(n.live for n in tree)
        assert not b.actor.running  # everything runs on A

        loop = asyncio.get_running_loop()
        started = loop.time()
        assert (await b.stop(scope, root.id)).running is True  # posted to B; everything runs on A
        ends = await asyncio.gather(*[
            wait_for_event(b, scope, n.id, lambda e: e.kind == "turn_ended", timeout=5)
            for n in tree])
        took = loop.time() - started
        # Each turn ended by the abort (its typed reason, below), not by its lease lapsing
        # (5 s here): a bound under that, not a speed figure. It was 1 s, and a clean-clone CI
        # run on a loaded machine took 1.0017 s (locally 0.06-0.12 s, beside two CPU burners).
        assert took < 4.0, f"the cascade took {took:.2f}s"
        reasons = {n.id: e.data["stop_reason"] for n, e in zip(tree, ends, strict=True)}
        assert reasons[root.id] == "cancelled:user"
        assert {reasons[i] for i in [*children, *grandchildren]} == {"cancelled:cascade"}
        # No cancelled descendant told (or woke) its parent: their final writes are done.
        for n in tree:
            assert await tree_store.pending_results(a.db, scope, n.id) == []
            assert not [e for e in await a.events(scope, n.id) if e.kind == "notification"]
        after = await a.tree(scope, root.id)
        assert {n.status for n in after[1:]} == {"cancelled"}
        assert not any(n.live or n.told for n in after)
        assert [len(await a.turns(scope, n.id)) for n in after] == [1] * 5


async def test_two_replicas_racing_to_tell_a_parent_tell_it_once(make_ator, tmp_path) -> None:
    def parent(request: ModelRequest) -> Reply:
        if results_in(request):
            return Reply(text="heard")
        if spawned_tool_results(request):
            return Reply(text="waiting")
        return Reply(calls=[_spawn("raced", "hang")])

    prefix = f"ator-test-race-{os.getpid()}-{id(tmp_path)}:"
    agents = Agents(parent, lambda task, r: Reply(hang=True))
    fast = {"lease_ttl": 1.0, "reaper_interval": 0.2, "redis_url": REDIS_URL,
            "redis_prefix": prefix}
    async with make_ator(providers={"agents": agents}, **fast) as a, \
            make_ator(providers={"agents": agents}, **fast) as b:
        scope, root = await new_thread(a, "agents")
        await a.ask(scope, root.id, "delegate", timeout=30)
        (child,) = await _spawned_ids(a, scope, root.id, 1)
        await wait_for_event(a, scope, child, lambda e: e.kind == "turn_started")
        # Three ways to end the child's turn race: both replicas' sweeps judging it lost
        # (as if its heartbeat were late) and a stop, whose final write tells the parent.
        raced = await asyncio.gather(
            turn_store.reap_lost_turns(a.db, 0.0),
            turn_store.reap_lost_turns(b.db, 0.0),
            b.stop(scope, child))
        reaped = [t for found in raced[:2] for t in found if t.thread_id == child]
        assert len(reaped) <= 1
        found = await wait_for_event(a, scope, root.id, lambda e: e.kind == "notification")
        assert found.data["subagent"]["id"] == str(child)
        assert found.data["subagent"]["status"] == ("errored" if reaped else "cancelled")
        await wait_for_event(a, scope, root.id, lambda e: e.kind == "turn_ended",
                             after_seq=found.seq)
        ended = await wait_for_event(a, scope, child, lambda e: e.kind == "turn_ended")
        assert ended.data["status"] == ("lost" if reaped else "stopped")
        notes = [e for e in await a.events(scope, root.id) if e.kind == "notification"]
        assert len(notes) == 1
        assert await tree_store.pending_results(a.db, scope, root.id) == []


async def test_a_child_killed_with_its_replica_is_reported_errored_lost(
    make_ator, database_url: str, tmp_path: Path,
) -> None:
    def parent(request: ModelRequest) -> Reply:
        return Reply(text=f"heard {len(results_in(request))}")

    agents = Agents(parent, lambda task, r: Reply(text="never here"))
    async with make_ator(providers={"agents": agents}, lease_ttl=1.0,
                         reaper_interval=0.2) as ator:
        scope, root = await new_thread(ator, "agents")
        here = Path(__file__).parent
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (os.environ.get("PYTHONPATH"), str(here.parent)) if p)}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(here / "procs" / "subagent_child.py"), database_url,
            str(tmp_path / "child"), str(root.id), str(scope.org_id),
            stdout=asyncio.subprocess.PIPE, env=env)
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            child = uuid.UUID(line.split()[1].decode())
        finally:
            proc.kill()  # SIGKILL: no shutdown, no final write
            await proc.wait()
        found = await wait_for_event(ator, scope, root.id, lambda e: e.kind == "notification",
                                     timeout=30)
        meta = found.data["subagent"]
        assert (meta["id"], meta["status"], meta["reason"]) == (str(child), "errored", "lost")
        assert 'status="errored" reason="lost"' in found.data["text"]
        ended = await wait_for_event(ator, scope, root.id, lambda e: e.kind == "turn_ended",
                                     after_seq=found.seq)
        assert ended.data["status"] == "done"
        (turn,) = await ator.turns(scope, child)
        assert turn.status == "lost"


async def test_a_result_claimed_but_never_delivered_is_delivered_by_the_sweep(
    make_ator,
) -> None:
    def parent(request: ModelRequest) -> Reply:
        if results_in(request):
            return Reply(text="heard")
        if spawned_tool_results(request):
            return Reply(text="waiting")
        return Reply(calls=[_spawn("orphan", "hang")])

    agents = Agents(parent, lambda task, r: Reply(hang=True))
    async with make_ator(providers={"agents": agents}, lease_ttl=1.0,
                         reaper_interval=0.2) as ator:
        scope, root = await new_thread(ator, "agents")
        await ator.ask(scope, root.id, "delegate", timeout=30)
        (child,) = await _spawned_ids(ator, scope, root.id, 1)
        await wait_for_event(ator, scope, child, lambda e: e.kind == "turn_started")
        # The sweep that closes the child's turn tells the parent, and the process dies
        # before it wakes the parent: nobody calls notify here. The reaper's sweep of
        # pending mailbox items is what delivers the result.
        closed = await turn_store.reap_lost_turns(ator.db, 0.0)
        (lost,) = [t for t in closed if t.thread_id == child]
        assert lost.told_parent == root.id
        found = await wait_for_event(ator, scope, root.id, lambda e: e.kind == "notification")
        assert found.data["subagent"]["id"] == str(child)
        assert found.data["subagent"]["reason"] == "lost"
        ended = await wait_for_event(ator, scope, root.id, lambda e: e.kind == "turn_ended",
                                     after_seq=found.seq)
        assert ended.data["status"] == "done"
        assert agents.requests[-1] and results_in(agents.requests[-1])
