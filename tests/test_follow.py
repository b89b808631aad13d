"""One "follow a thread" loop: `Ator.ask`, the long-poll (`Ator.wait_events`) and the stream
of SSE and sockets (`thread_frames`) all read a thread through `engine.stream.ThreadFollow`
(they used to be three loops, each with its own catch-up rules). Real PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from ator.engine import stream
from ator.engine.stream import ThreadFollow, thread_frames
from ator.providers.scripted import ScriptedProvider, ScriptStep
from tests.conftest import new_thread
from tests.realtime_util import append_notes


@pytest.fixture
def entered(monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """The cursor of every ThreadFollow entered (wrapping the real one)."""
    cursors: list[int | None] = []
    real = ThreadFollow.__aenter__

    async def spy(self: ThreadFollow) -> ThreadFollow:
        cursors.append(self.seq)
        return await real(self)

    monkeypatch.setattr(ThreadFollow, "__aenter__", spy)
    return cursors


async def test_ask_long_poll_and_stream_follow_through_one_reader(
    make_ator: Any, entered: list[int | None],
) -> None:
    provider = ScriptedProvider([ScriptStep(text="hello")])
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s")
        result = await ator.ask(scope, thread.id, "hi", timeout=20)
        assert (result.status, result.text) == ("done", "hello")
        assert entered == [None]  # subscribed before submitting: the cursor comes later
        assert [f["type"] for f in result.events][-1] == "turn_ended"
        assert all(f["v"] == 1 for f in result.events)

        last = result.events[-1]["seq"]
        await append_notes(ator, scope, thread.id, ["after"])
        polled = await ator.wait_events(scope, thread.id, after_seq=last, timeout=5)
        assert [(f["seq"], f["type"]) for f in polled] == [(last + 1, "note")]
        assert entered[1:] == [last]

        frames = await thread_frames(ator.db, ator.coord, scope, thread.id,
                                     after_seq=last, deltas=False)
        try:
            first = await anext(frames)
        finally:
            await frames.aclose()
        assert first == polled[0] and entered[2:] == [last]
    assert stream.__all__.count("ThreadFollow") == 1
