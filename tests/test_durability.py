"""Postgres is the truth: a SIGKILLed owner's turn is closed by the reaper and the thread goes
on with its full history; a stop reaches the replica that owns the turn over Redis."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ator import Ator, Scope
from ator.coord import RedisCoordinator
from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage
from tests.conftest import REDIS_URL, ended, new_thread, wait_for_event

HERE = Path(__file__).parent


class Recorder:
    """Replies with every user text it was given, so a test can see the whole context."""

    name = "durable"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        texts = [
            b["text"] for m in request.messages if m["role"] == "user"
            for b in m["content"] if b["type"] == "text"
        ]
        yield TextDelta(" / ".join(texts))
        yield MessageStop("end_turn", Usage(5, 5), request.model)


async def test_sigkilled_owner_turn_is_reaped_and_the_thread_continues(
    make_ator, database_url: str, tmp_path: Path
) -> None:
    recorder = Recorder()
    async with make_ator(providers={"durable": recorder}, lease_ttl=1.0,
                         reaper_interval=0.2) as ator:
        scope, thread = await new_thread(ator, "durable")
        # The child imports the same ator as this process (a PYTHONPATH given to the test
        # run comes first), plus `tests` from the repository root.
        pythonpath = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(HERE.parent))
                                     if p)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(HERE / "procs" / "hanging_turn.py"), database_url,
            str(tmp_path / "child"), str(thread.id), str(scope.org_id),
            stdout=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": pythonpath},
        )
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line.startswith(b"RUNNING "), line
        lost_turn = uuid.UUID(line.split()[1].decode())
        proc.send_signal(signal.SIGKILL)
        await proc.wait()

        # The survivor's reaper notices the silence and closes the turn as error:lost.
        event = await wait_for_event(ator, scope, thread.id, ended, timeout=30)
        assert event.data == {"turn_id": str(lost_turn), "status": "lost",
                              "stop_reason": "error:lost", "error": "owner stopped heartbeating"}
        turn = await ator.turn(scope, lost_turn)
        assert (turn.status, turn.stop_reason) == ("lost", "error:lost")
        kinds = [(e.kind, e.data.get("client_message_id")) for e in
                 await ator.events(scope, thread.id)]
        assert ("message", "before-crash") in kinds

        # The next message gets a reply that saw the message from before the crash.
        result = await ator.ask(scope, thread.id, "what number?", timeout=30)
        assert result.stop_reason == "end_turn"
        # …and was told the turn that took it was cut short, so it does not redo it unasked.
        before, note, after = result.text.split(" / ")
        assert (before, after) == ("remember the number 7431", "what number?")
        assert note.startswith("[ator] Your previous turn was interrupted")


@pytest.mark.redis
async def test_stop_through_a_second_redis_client_aborts_the_owners_turn(
    settings_factory,
) -> None:
    prefix = f"ator-test-{uuid.uuid4().hex[:8]}:"

    class Hang:
        name = "durable"
        entered = asyncio.Event()

        async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
            self.entered.set()
            yield TextDelta("…")
            await asyncio.Event().wait()

    hang = Hang()
    owner = await Ator.open(settings_factory(), providers={"durable": hang},
                            coordinator=RedisCoordinator(REDIS_URL, prefix=prefix))
    other = await Ator.open(settings_factory(), providers={"durable": hang},
                            coordinator=RedisCoordinator(REDIS_URL, prefix=prefix))
    try:
        scope, thread = await new_thread(owner, "durable")
        await owner.submit(scope, thread.id, "work")
        await asyncio.wait_for(hang.entered.wait(), 10)
        assert thread.id in owner.actor.running and thread.id not in other.actor.running
        await other.stop(scope, thread.id)
        event = await wait_for_event(other, scope, thread.id, ended, timeout=10)
        assert event.data["stop_reason"] == "cancelled:user"
        assert event.data["status"] == "stopped"
    finally:
        await other.close()
        await owner.close()


async def test_a_restarted_process_sees_the_same_conversation(make_ator) -> None:
    recorder = Recorder()
    async with make_ator(providers={"durable": recorder}) as first:
        scope, thread = await new_thread(first, "durable")
        await first.ask(scope, thread.id, "alpha", timeout=30)
    async with make_ator(providers={"durable": recorder}) as second:
        result = await second.ask(Scope(scope.org_id), thread.id, "beta", timeout=30)
        assert result.text == "alpha / beta"
        assert len(await second.turns(scope, thread.id)) == 2

