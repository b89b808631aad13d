"""The turn's fence (agent.fence, engine.liveness): a turn held up past its lease (its
heartbeats stopped, as in a paused process) whose thread another replica took over runs
neither the tool its late reply asks for nor another model call; one merely late, that nobody
took, carries on; and a live turn never asks anyone (the hot path reads a clock).

The takeover is real: replica B is a second engine on the same PostgreSQL and Redis; its
reaper closes the silent turn and its pump runs the thread's next message.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ator.engine.actor import lease_key
from ator.engine.liveness import Heartbeats
from ator.engine.turn import TurnHandle
from ator.providers.base import (
    MessageStop,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ToolUseStart,
    ToolUseStop,
    Usage,
)
from ator.providers.scripted import ScriptedProvider, ScriptStep
from tests.conftest import REDIS_URL, drop_keys, ended, new_thread, until, wait_for_event
from tests.test_loop_branches import CountingTool

TTL = 0.6


class HeldUp:
    """The first call's reply (a `ping` tool call) arrives only once `go` is set; later calls
    answer in text."""

    name = "held-up"

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.go = asyncio.Event()
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        if len(self.requests) == 1:
            self.entered.set()
            await self.go.wait()
            yield ToolUseStart("call-1", "ping")
            yield ToolUseStop("call-1", {})
            yield MessageStop("tool_use", Usage(3, 3), request.model)
            return
        yield TextDelta("pinged")
        yield MessageStop("end_turn", Usage(2, 2), request.model)


def counting_confirms(beats: Heartbeats) -> list[bool]:
    """Wrap the real authoritative check to see when the fence asks, and what it learnt."""
    seen: list[bool] = []
    real = beats.confirm

    async def confirm(lease: Any, handle: TurnHandle) -> bool:
        seen.append(await real(lease, handle))
        return seen[-1]

    beats.confirm = confirm  # type: ignore[method-assign]
    return seen


@pytest.fixture
async def shared_redis() -> AsyncIterator[dict[str, Any]]:
    """Settings for replicas of one deployment: one Redis, a key prefix of their own."""
    prefix = f"ator-test:{uuid.uuid4().hex}:"
    yield {"redis_url": REDIS_URL, "redis_prefix": prefix}
    await drop_keys(prefix)


async def _held_up(ator: Any, provider: HeldUp) -> tuple[Any, Any]:
    """A turn on `ator` waiting for its model's reply, its replica held up since: nothing
    of it beats any more (its reaper ticks once a minute), until its lease lapses."""
    scope, thread = await new_thread(ator, "held-up")
    await ator.submit(scope, thread.id, "ping it")
    await asyncio.wait_for(provider.entered.wait(), 5)
    await ator.actor.heartbeats.close()
    await _until_held_by(ator.coord, lease_key(thread.id), None)  # it lapses on its own
    return scope, thread


async def _until_held_by(coord: Any, key: str, token: str | None) -> None:
    async with asyncio.timeout(10):
        while await coord.holder(key) != token:  # noqa: ASYNC110 (an expiry says nothing)
            await asyncio.sleep(0.02)


@pytest.mark.redis
async def test_a_turn_taken_over_while_held_up_runs_neither_its_tool_nor_a_call(
        make_ator, shared_redis: dict[str, Any]) -> None:
    provider, ping = HeldUp(), CountingTool()
    other = ScriptedProvider([ScriptStep(text="answered on B")], repeat_last=True)
    async with make_ator(providers={"held-up": other}, lease_ttl=TTL, reaper_interval=0.1,
                         **shared_redis) as b:
        # B leads the reapers (the lease goes to the first to ask), so A's never sweeps.
        await _until_held_by(b.coord, "lease:reaper", b.reaper.token)
        async with make_ator(providers={"held-up": provider}, tools=[ping.tool()],
                             lease_ttl=TTL, reaper_interval=60, **shared_redis) as a:
            confirms = counting_confirms(a.actor.heartbeats)
            scope, thread = await _held_up(a, provider)
            [stale] = await a.turns(scope, thread.id)
            # B's reaper closes the silent turn; B runs the thread's next message.
            lost = await wait_for_event(b, scope, thread.id, ended, timeout=10)
            assert lost.data["turn_id"] == str(stale.id)
            assert lost.data["stop_reason"] == "error:lost"
            await b.submit(scope, thread.id, "anyone there?")
            taken = await wait_for_event(b, scope, thread.id, ended, after_seq=lost.seq,
                                         timeout=10)
            assert taken.data["stop_reason"] == "end_turn"
            last_seq = max(e.seq for e in await b.events(scope, thread.id))

            provider.go.set()  # A's reply arrives at last: it asks for the tool
            await until(lambda: thread.id not in a.actor.running, 10)

            assert ping.calls == 0, "the taken turn ran its tool"
            assert len(provider.requests) == 1, "the taken turn called its model again"
            assert confirms == [False]  # the fence asked, once, and learnt it was taken
            late = [e for e in await b.events(scope, thread.id) if e.seq > last_seq]
            assert late == [], f"the taken turn wrote after the takeover: {late}"
            turn = await b.turn(scope, stale.id)
            assert (turn.status, turn.stop_reason) == ("lost", "error:lost")


async def test_a_turn_late_but_not_taken_runs_its_tool_once(make_ator) -> None:
    provider, ping = HeldUp(), CountingTool()
    async with make_ator(providers={"held-up": provider}, tools=[ping.tool()],
                         lease_ttl=TTL, reaper_interval=60) as ator:
        confirms = counting_confirms(ator.actor.heartbeats)
        scope, thread = await _held_up(ator, provider)
        provider.go.set()  # late: its lease lapsed, but nobody reaped it or took the thread
        await until(lambda: thread.id not in ator.actor.running, 10)
        [turn] = await ator.turns(scope, thread.id)
        assert (turn.status, turn.stop_reason) == ("done", "end_turn")
        assert ping.calls == 1
        assert confirms and confirms[0] is True  # asked, found it still ours, took it again


async def test_a_live_turn_never_asks_before_it_acts(make_ator) -> None:
    provider, ping = HeldUp(), CountingTool()
    provider.go.set()
    async with make_ator(providers={"held-up": provider}, tools=[ping.tool()]) as ator:
        confirms = counting_confirms(ator.actor.heartbeats)
        scope, thread = await new_thread(ator, "held-up")
        result = await ator.ask(scope, thread.id, "ping", timeout=10)
        assert (result.stop_reason, ping.calls, len(provider.requests)) == ("end_turn", 1, 2)
        assert confirms == []  # two model calls and a tool step, fenced by a clock read
