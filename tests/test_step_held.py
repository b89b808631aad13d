"""A tool step is held while the next model call runs (engine/steps.py): the call does not
wait for the step's write, a fast call's reply is written with the step in one statement, a
stop while that step is being written keeps it once, and a hook that reads the turn's spend
runs only once the step is durable. The writes are held back here by a row lock on the
thread (its seq counter), from another connection, so the order is forced rather than raced."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import asyncpg

from ator.agent.hooks import LoopHook
from ator.providers.base import Usage
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.tools.base import Tool, ToolContext
from tests.conftest import ended, new_thread, wait_for_event

NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}


class _Lock:
    """A tool that, when called, locks its thread's row from another connection for
    `hold` seconds, or until `release` is set: the step write that follows it waits for the
    lock."""

    def __init__(self, url: str, hold: float) -> None:
        self.url = url
        self.hold = hold
        self.release = asyncio.Event()
        self.released: float | None = None
        self.holding: asyncio.Task[None] | None = None
        self.conn: asyncpg.Connection | None = None

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> str:
        locked = asyncio.Event()
        self.holding = asyncio.ensure_future(self._hold(ctx.thread_id, locked))
        await locked.wait()
        return "locked"

    async def connect(self) -> None:
        """Open the lock's connection before the turn, so the tool is one quick statement."""
        self.conn = await asyncpg.connect(self.url)

    async def _hold(self, thread_id: Any, locked: asyncio.Event) -> None:
        conn = self.conn or await asyncpg.connect(self.url)
        try:
            async with conn.transaction():
                await conn.execute("SELECT 1 FROM threads WHERE id = $1 FOR UPDATE", thread_id)
                locked.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.release.wait(), self.hold)
                self.released = asyncio.get_running_loop().time()
        finally:
            await conn.close()

    def tool(self) -> Tool:
        return Tool("lock", "Locks.", NO_ARGS, self)


def _plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def test_the_next_call_does_not_wait_for_the_tool_steps_write(
    make_ator: Any, database_url: str,
) -> None:
    called: list[float] = []
    loop = asyncio.get_running_loop()

    def respond(request: Any) -> ScriptStep:
        if request.messages[-1]["role"] == "user" and any(
                b["type"] == "tool_result" for b in request.messages[-1]["content"]):
            called.append(loop.time())
            return ScriptStep(text="done")
        return ScriptStep(tool_calls=[("lock", {})])

    lock = _Lock(_plain(database_url), hold=0.5)
    async with make_ator(providers={"s": ScriptedProvider(responder=respond)},
                         tools=[lock.tool()]) as ator:
        scope, thread = await new_thread(ator, "s")
        result = await ator.ask(scope, thread.id, "go", timeout=30)
        assert result.stop_reason == "end_turn" and result.text == "done"
        assert lock.released is not None and called
        assert called[0] < lock.released  # sent while the step was still to be written
        # The step and the reply that followed it, in order, once each.
        kinds = [e.kind for e in await ator.events(scope, thread.id)]
        assert kinds == ["turn_started", "message", "assistant", "tool_results", "assistant",
                         "turn_ended"]
        (turn,) = await ator.turns(scope, thread.id)
        assert (turn.steps, turn.input_tokens) == (2, 20)


async def test_a_stop_while_the_held_step_is_written_keeps_it_once(
    make_ator: Any, database_url: str,
) -> None:
    """The next call is slow (it streams, then hangs), so the held step is flushed while it
    runs; the flush waits for the lock, and the stop lands meanwhile (the lock is released
    only once the turn has it): the flush completes, then the turn ends with the call cut
    short, billed. Each wait is on a condition, not on the clock."""
    provider = ScriptedProvider([
        ScriptStep(tool_calls=[("lock", {})]),
        ScriptStep(text="never", hang_after_text=True, usage=Usage(7, 3))])
    provider.record_requests = True
    lock = _Lock(_plain(database_url), hold=60.0)
    await lock.connect()
    async with make_ator(providers={"s": provider}, tools=[lock.tool()]) as ator:
        # The tool (one statement on an open connection) ends well within the cap, so what
        # is held is flushed during the second call, not during the tool: with a 10 ms cap a
        # loaded CI machine flushed during the tool, which then waited on its own lock.
        scope, thread = await new_thread(ator, "s", config={"caps": {"persist_calls_after": 0.5}})
        await ator.submit(scope, thread.id, "go")
        await _until(lambda: len(provider.requests) == 2)  # the second call was sent
        await _until_a_write_waits_for_a_lock(_plain(database_url))  # the flush, blocked
        await ator.stop(scope, thread.id)
        handle = ator.actor.running[thread.id]
        await _until(lambda: handle.reason is not None)  # the turn has the stop
        lock.release.set()
        end = await wait_for_event(ator, scope, thread.id, ended)
        assert end.data["stop_reason"] == "cancelled:user"
        events = await ator.events(scope, thread.id)
        assert [e.kind for e in events][-4:] == [
            "assistant", "tool_results", "assistant", "turn_ended"]  # the step kept, once
        assert events[-2].data.get("interrupted") is True
        (turn,) = await ator.turns(scope, thread.id)
        assert turn.status != "running" and turn.steps == 1
        assert turn.input_tokens == 10 + 7  # both calls billed: the step's, the cut one


async def _until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 (nothing announces these)
            await asyncio.sleep(0.01)


async def _until_a_write_waits_for_a_lock(url: str, timeout: float = 30.0) -> None:
    conn = await asyncpg.connect(url)

    async def waiting() -> bool:
        return bool(await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database()"))

    try:
        async with asyncio.timeout(timeout):
            while not await waiting():  # noqa: ASYNC110 (PostgreSQL announces no lock wait)
                await asyncio.sleep(0.01)
    finally:
        await conn.close()


class _Reader(LoopHook):
    """A hook that reads the turn's spend (the default for one that overrides before_call)."""

    def __init__(self) -> None:
        self.at: list[float] = []

    async def before_call(self, turn: Any, state: Any, request: Any) -> Any:
        self.at.append(asyncio.get_running_loop().time())
        return request


async def test_hooks_that_read_the_spend_run_once_the_step_is_durable(
    make_ator: Any, database_url: str,
) -> None:
    """A budget, a cap (the org's, a subagent's, a workflow run's, the daily one) reads the
    ledger in its `before_call`: it runs after the held step's write billed its call, never
    on a ledger one call behind."""
    reader = _Reader()
    provider = ScriptedProvider([ScriptStep(tool_calls=[("lock", {})]),
                                 ScriptStep(text="ok")])
    lock = _Lock(_plain(database_url), hold=0.5)
    async with make_ator(providers={"s": provider}, tools=[lock.tool()],
                         hooks=[reader]) as ator:
        scope, thread = await new_thread(ator, "s")
        result = await ator.ask(scope, thread.id, "go", timeout=30)
        assert result.stop_reason == "end_turn"
        assert len(reader.at) == 2 and lock.released is not None
        assert reader.at[1] >= lock.released
