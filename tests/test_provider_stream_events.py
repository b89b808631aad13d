"""UsageUpdate and Keepalive through the real SDKs against the wire fakes: what a call cut short
consumed, and signs of life that keep a stall watchdog quiet."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ator.providers.anthropic import AnthropicProvider
from ator.providers.base import (
    KEEPALIVE,
    Keepalive,
    MessageStop,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStart,
    Usage,
    UsageMeter,
    UsageUpdate,
    estimate_tokens,
    partial_usage,
)
from ator.providers.openai import OpenAIProvider
from ator.testing import (
    AnthropicWireFake,
    Hang,
    Keepalives,
    OpenAIWireFake,
    Reply,
    WireUsage,
)

MODEL = "claude-test-model"
LONG_TEXT = " ".join(f"word{i}" for i in range(200))  # 200 text deltas on the wire


def req() -> ModelRequest:
    return ModelRequest(
        model=MODEL, messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    )


async def collect(stream: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [event async for event in stream]


async def watched(stream: AsyncIterator[StreamEvent], stall: float) -> list[StreamEvent]:
    """Consume `stream` as the agent loop does: a watchdog rescheduled on every event."""
    loop = asyncio.get_running_loop()
    seen: list[StreamEvent] = []
    async with asyncio.timeout(stall) as watchdog:
        async for event in stream:
            watchdog.reschedule(loop.time() + stall)
            seen.append(event)
    return seen


async def cut_short(stream: AsyncIterator[StreamEvent], seen: list[StreamEvent], text: int) -> None:
    """Consume until `text` characters of text arrived, then stop the call as a user would:
    cancel the task that reads the stream (the events seen so far stay in `seen`)."""
    got = asyncio.Event()

    async def consume() -> None:
        chars = 0
        async for event in stream:
            seen.append(event)
            if isinstance(event, TextDelta):
                chars += len(event.text)
                if chars >= text:
                    got.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(10):
        await got.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# --------------------------------------------------------------------------- the meter (pure)


def test_meter_bills_the_final_usage_once_the_call_finished() -> None:
    final = Usage(100, 40, 10, 5)
    events: list[StreamEvent] = [
        UsageUpdate(Usage(100, 1, 10, 5)),
        TextDelta("x" * 4000),
        MessageStop("end_turn", final),
    ]
    assert partial_usage(events) == final


def test_meter_raises_output_to_the_streamed_estimate_and_flags_it() -> None:
    events: list[StreamEvent] = [
        UsageUpdate(Usage(1200, 1, 300, 50)),
        KEEPALIVE,
        ThinkingDelta("t" * 40),
        TextDelta("a" * 81),
        ToolUseStart("toolu_1", "calc"),  # 4 characters of name
        ToolInputDelta("toolu_1", '{"x": 1}'),  # 8 characters
    ]
    usage = partial_usage(events)
    assert usage == Usage(1200, estimate_tokens(40 + 81 + 4 + 8), 300, 50, True, True)
    assert usage.output_tokens == 34  # 133 / 4 rounded up


def test_meter_keeps_a_reported_output_that_is_higher_than_the_estimate() -> None:
    reported = Usage(500, 90, 0, 0)
    assert partial_usage([UsageUpdate(reported), TextDelta("short")]) == reported


def test_meter_with_nothing_reported_estimates_output_and_says_so() -> None:
    assert partial_usage([TextDelta("abcdefgh")]) == Usage(
        output_tokens=2, reported=False, estimated=True
    )
    assert partial_usage([KEEPALIVE]) == Usage(reported=False)
    assert partial_usage([]) == Usage(reported=False)


def test_meter_latest_update_wins_and_it_is_incremental() -> None:
    meter = UsageMeter()
    meter.observe(UsageUpdate(Usage(10, 1)))
    meter.observe(UsageUpdate(Usage(10, 7)))
    assert meter.usage() == Usage(10, 7) and not meter.finished
    meter.observe(MessageStop("end_turn", Usage(10, 8)))
    assert meter.finished and meter.usage() == Usage(10, 8)


def test_estimated_flag_survives_addition() -> None:
    total = Usage(1, 1) + Usage(2, 2, estimated=True)
    assert total == Usage(3, 3, 0, 0, True, True)


# --------------------------------------------------------------------------- Anthropic


async def test_anthropic_reports_message_start_usage_first_and_message_delta_usage_last() -> None:
    reply = Reply(
        text="hello there",
        usage=WireUsage(input_tokens=1200, output_tokens=42, cache_read_tokens=300,
                        cache_write_tokens=50),
    )
    async with (
        AnthropicWireFake([reply]) as fake,
        AnthropicProvider(api_key="k", base_url=fake.base_url) as provider,
    ):
        events = await collect(provider.stream(req()))
    updates = [e for e in events if isinstance(e, UsageUpdate)]
    assert events[0] == UsageUpdate(Usage(1200, 1, 300, 50))  # message_start, before any text
    assert updates[-1] == UsageUpdate(Usage(1200, 42, 300, 50))  # message_delta, cumulative
    assert events[-1] == MessageStop("end_turn", Usage(1200, 42, 300, 50), MODEL)


async def test_anthropic_every_wire_event_yields_an_event_pings_as_keepalives() -> None:
    reply = Reply(text="one two three")
    async with (
        AnthropicWireFake([reply]) as fake,
        AnthropicProvider(api_key="k", base_url=fake.base_url) as provider,
    ):
        events = await collect(provider.stream(req()))
        wire = fake.stream_events(reply, fake.requests[0])
    pings = sum(1 for frame in wire if frame.startswith(b"event: ping"))
    assert pings >= 1
    # ping, the empty text block start and the text block stop have nothing in them.
    assert sum(1 for e in events if isinstance(e, Keepalive)) == pings + 2
    assert len(events) == len(wire)


async def test_anthropic_pings_longer_than_the_stall_timeout_keep_the_call_alive() -> None:
    # Pings every 50 ms for 600 ms, with a 200 ms stall watchdog: the call must finish.
    script = Keepalives(Reply(text="worth the wait"), after_events=1, every=0.05, duration=0.6)
    async with (
        AnthropicWireFake([script]) as fake,
        AnthropicProvider(api_key="k", base_url=fake.base_url) as provider,
    ):
        events = await watched(provider.stream(req()), stall=0.2)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "worth the wait"
    assert isinstance(events[-1], MessageStop)
    assert sum(1 for e in events if isinstance(e, Keepalive)) >= 8


async def test_anthropic_hang_without_keepalives_trips_the_stall_watchdog() -> None:
    # The counterpart of the test above: silence for longer than the watchdog does end it.
    async with (
        AnthropicWireFake([Hang()]) as fake,
        AnthropicProvider(api_key="k", base_url=fake.base_url) as provider,
    ):
        with pytest.raises(TimeoutError):
            await watched(provider.stream(req()), stall=0.2)


async def test_anthropic_hang_with_keepalives_is_alive_until_a_turn_timeout() -> None:
    hang = Hang(reply=Reply(text="never finishes"), after_events=3, keepalive_every=0.03)
    seen: list[StreamEvent] = []

    async def consume(stream: AsyncIterator[StreamEvent]) -> None:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(0.2) as watchdog:
            async for event in stream:
                watchdog.reschedule(loop.time() + 0.2)
                seen.append(event)

    async with (
        AnthropicWireFake([hang]) as fake,
        AnthropicProvider(api_key="k", base_url=fake.base_url) as provider,
    ):
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.6):  # the turn timeout, not the stall watchdog
                await consume(provider.stream(req()))
        async with asyncio.timeout(5):
            await fake.requests[0].client_gone.wait()
    assert sum(1 for e in seen if isinstance(e, Keepalive)) >= 5
    assert not any(isinstance(e, MessageStop) for e in seen)


async def test_anthropic_call_stopped_mid_stream_bills_input_and_streamed_output() -> None:
    reply = Reply(
        text=LONG_TEXT,
        usage=WireUsage(input_tokens=1500, output_tokens=999, cache_read_tokens=200),
    )
    # message_start, block start, ping, then 100 text deltas; then the model goes quiet.
    hang = Hang(reply=reply, after_events=103)
    seen: list[StreamEvent] = []
    async with (
        AnthropicWireFake([hang]) as fake,
        AnthropicProvider(api_key="k", base_url=fake.base_url) as provider,
    ):
        await cut_short(provider.stream(req()), seen, text=400)
        async with asyncio.timeout(5):
            await fake.requests[0].client_gone.wait()
    streamed = sum(len(e.text) for e in seen if isinstance(e, TextDelta))
    usage = partial_usage(seen)
    assert (usage.input_tokens, usage.cache_read_tokens) == (1500, 200)
    assert usage.output_tokens == estimate_tokens(streamed) > 100
    assert usage.estimated and usage.reported


# --------------------------------------------------------------------------- OpenAI


async def test_openai_estimates_the_prompt_until_the_usage_chunk_reports_it() -> None:
    reply = Reply(text="hello there", usage=WireUsage(input_tokens=700, output_tokens=12))
    async with (
        OpenAIWireFake([reply]) as fake,
        OpenAIProvider(api_key="k", base_url=fake.base_url) as provider,
    ):
        events = await collect(provider.stream(req()))
    first = events[0]
    assert isinstance(first, UsageUpdate)
    assert first.usage.estimated and not first.usage.reported
    assert first.usage.input_tokens > 0 and first.usage.output_tokens == 0
    assert events[-2] == UsageUpdate(Usage(700, 12))  # the usage chunk, as reported
    assert events[-1] == MessageStop("end_turn", Usage(700, 12), MODEL)


async def test_openai_empty_delta_chunks_are_keepalives_and_keep_the_call_alive() -> None:
    script = Keepalives(Reply(text="worth the wait"), after_events=1, every=0.05, duration=0.6)
    async with (
        OpenAIWireFake([script]) as fake,
        OpenAIProvider(api_key="k", base_url=fake.base_url) as provider,
    ):
        events = await watched(provider.stream(req()), stall=0.2)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "worth the wait"
    assert isinstance(events[-1], MessageStop)
    # The role chunk (empty content), the keepalives and the bare finish chunk.
    assert sum(1 for e in events if isinstance(e, Keepalive)) >= 8


async def test_openai_call_stopped_mid_stream_bills_an_estimate_flagged_as_such() -> None:
    reply = Reply(text=LONG_TEXT, usage=WireUsage(input_tokens=1500, output_tokens=999))
    hang = Hang(reply=reply, after_events=101)  # the role chunk and 100 text deltas
    seen: list[StreamEvent] = []
    async with (
        OpenAIWireFake([hang]) as fake,
        OpenAIProvider(api_key="k", base_url=fake.base_url) as provider,
    ):
        await cut_short(provider.stream(req()), seen, text=400)
    streamed = sum(len(e.text) for e in seen if isinstance(e, TextDelta))
    usage = partial_usage(seen)
    assert usage.input_tokens > 0  # the prompt's estimate: the server never said
    assert usage.output_tokens == estimate_tokens(streamed) > 100
    assert usage.estimated and not usage.reported


@pytest.mark.parametrize("fake_cls", [AnthropicWireFake, OpenAIWireFake])
async def test_a_consumer_ignoring_keepalives_sees_the_same_reply(fake_cls: Any) -> None:
    # Keepalive and UsageUpdate are additive: the content events are unchanged by them.
    script = Keepalives(Reply(text="a b c"), after_events=2, every=0.02, duration=0.1)
    provider_cls: Any = AnthropicProvider if fake_cls is AnthropicWireFake else OpenAIProvider
    async with (
        fake_cls([script, Reply(text="a b c")]) as fake,
        provider_cls(api_key="k", base_url=fake.base_url) as provider,
    ):
        slow = await collect(provider.stream(req()))
        fast = await collect(provider.stream(req()))

    def content(events: list[StreamEvent]) -> list[StreamEvent]:
        return [e for e in events if not isinstance(e, Keepalive | UsageUpdate)]

    assert content(slow) == content(fast)
