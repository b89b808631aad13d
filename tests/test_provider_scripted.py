"""The scripted provider reports usage and signs of life the way the real adapters do, so the
loop's handling of calls cut short can be tested without a wire fake."""

from __future__ import annotations

import asyncio

import pytest

from ator.providers.base import (
    Keepalive,
    MessageStop,
    ModelRequest,
    StreamEvent,
    TextDelta,
    Usage,
    UsageUpdate,
    partial_usage,
)
from ator.providers.scripted import ScriptedProvider, ScriptStep

REQUEST = ModelRequest(
    model="m", messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
)


async def test_input_usage_comes_first_and_the_final_usage_last() -> None:
    provider = ScriptedProvider([ScriptStep(text="hello", usage=Usage(120, 7, 30, 4))])
    events = [e async for e in provider.stream(REQUEST)]
    assert events[0] == UsageUpdate(Usage(120, 0, 30, 4))
    assert events[-1] == MessageStop("end_turn", Usage(120, 7, 30, 4), "m")


async def test_a_step_without_reported_usage_sends_no_update() -> None:
    provider = ScriptedProvider([ScriptStep(text="x", usage=Usage(reported=False))])
    events = [e async for e in provider.stream(REQUEST)]
    assert not any(isinstance(e, UsageUpdate) for e in events)


async def test_hang_after_text_with_keepalives_is_alive_but_never_done() -> None:
    step = ScriptStep.from_dict(
        {"text": "x" * 400, "usage": {"input_tokens": 900, "output_tokens": 500},
         "hang_after_text": True, "keepalive_every": 0.02}
    )
    seen: list[StreamEvent] = []
    enough = asyncio.Event()

    async def consume() -> None:
        async for event in ScriptedProvider([step]).stream(REQUEST):
            seen.append(event)
            if sum(isinstance(e, Keepalive) for e in seen) >= 3:
                enough.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(5):
        await enough.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert isinstance(seen[1], TextDelta)
    assert not any(isinstance(e, MessageStop) for e in seen)
    assert partial_usage(seen) == Usage(900, 100, 0, 0, True, True)
