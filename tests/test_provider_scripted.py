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
    ToolUseStart,
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


async def test_items_injected_beside_tool_results_do_not_restart_the_script() -> None:
    """A subagent's result injected next to tool results is the same turn going on: the
    script plays its next step, and every tool call gets an id of its own."""
    provider = ScriptedProvider([ScriptStep(tool_calls=[("t", {})]), ScriptStep(text="next")])
    first = [e async for e in provider.stream(REQUEST)]
    [start] = [e for e in first if isinstance(e, ToolUseStart)]
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": start.id, "name": "t",
                                              "input": {}}]}
    results = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": start.id, "content": "ok"},
        {"type": "text", "text": "<subagent_result>done</subagent_result>"}]}
    request = ModelRequest(model="m", messages=[*REQUEST.messages, call, results])
    second = [e async for e in provider.stream(request)]
    assert [e.text for e in second if isinstance(e, TextDelta)] == ["next"]
    again = [e async for e in provider.stream(REQUEST)]
    [restart] = [e for e in again if isinstance(e, ToolUseStart)]
    assert restart.id != start.id  # a new turn's call is a new call
