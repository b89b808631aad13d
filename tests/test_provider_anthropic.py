"""AnthropicProvider through the real `anthropic` SDK against the wire-level fake."""

from __future__ import annotations

import asyncio
import copy
import email.utils
import json
import time
from typing import Any, cast

import anthropic
import httpx2
import pytest

from ator.errors import ConfigError, ContextOverflow, ProviderError
from ator.providers.anthropic import MAX_CACHE_BREAKPOINTS, AnthropicProvider, build_params
from ator.providers.base import (
    MessageStop,
    ModelRequest,
    Provider,
    StreamEvent,
    SystemBlock,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolSpec,
    ToolUseStart,
    ToolUseStop,
    Usage,
)
from ator.testing import (
    AnthropicWireFake,
    Cut,
    Hang,
    HttpError,
    Reply,
    StreamError,
    ToolCall,
    WireUsage,
)

MODEL = "claude-test-model"  # not in the SDK's deprecated list: that would warn (= fail here)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def req(**kwargs: Any) -> ModelRequest:
    kwargs.setdefault("messages", [user("hi")])
    return ModelRequest(model=MODEL, **kwargs)


async def run(fake: AnthropicWireFake, request: ModelRequest, **kw: Any) -> list[StreamEvent]:
    kw.setdefault("api_key", "sk-test")
    async with AnthropicProvider(base_url=fake.base_url, **kw) as provider:
        return [event async for event in provider.stream(request)]


async def fail(fake: AnthropicWireFake, request: ModelRequest | None = None) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await run(fake, request or req())
    return info.value


def count_cache_control(body: dict[str, Any]) -> int:
    return json.dumps(body).count('"cache_control"')


# --------------------------------------------------------------------------- streaming


async def test_text_streams_as_deltas_and_ends_with_message_stop() -> None:
    async with AnthropicWireFake([Reply(text="Hello there, brave new world")]) as fake:
        events = await run(fake, req(max_tokens=321))

    texts = [e for e in events if isinstance(e, TextDelta)]
    assert len(texts) > 1
    assert "".join(t.text for t in texts) == "Hello there, brave new world"
    assert events[-1] == MessageStop("end_turn", Usage(10, 5, 0, 0), MODEL)
    assert sum(isinstance(e, MessageStop) for e in events) == 1

    sent = fake.last_request
    assert sent.path == "/v1/messages"
    assert sent.body["stream"] is True
    assert sent.body["max_tokens"] == 321
    assert sent.body["messages"][0]["content"][0]["text"] == "hi"


async def test_provider_satisfies_the_protocol() -> None:
    async with (
        AnthropicWireFake() as fake,
        AnthropicProvider(api_key="k", base_url=fake.base_url) as provider,
    ):
        assert isinstance(provider, Provider)
        assert provider.name == "anthropic"


async def test_sse_frames_split_across_tcp_chunks_still_parse() -> None:
    async with AnthropicWireFake([Reply(text="split me up please")], chunk_size=7) as fake:
        events = await run(fake, req())
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "split me up please"


async def test_tool_use_with_fragmented_json_input() -> None:
    call = ToolCall("get_weather", {"city": "Paris", "units": "celsius"}, id="toolu_1", fragments=5)
    async with AnthropicWireFake([Reply(text="Checking.", tool_calls=[call])]) as fake:
        events = await run(fake, req())

    start = events.index(ToolUseStart("toolu_1", "get_weather"))
    deltas = [e for e in events if isinstance(e, ToolInputDelta)]
    assert len(deltas) == 5 and all(d.id == "toolu_1" for d in deltas)
    stop = next(e for e in events if isinstance(e, ToolUseStop))
    assert events.index(stop) > start
    assert stop.input == {"city": "Paris", "units": "celsius"}
    assert stop.raw == "".join(d.partial_json for d in deltas)
    assert isinstance(events[-1], MessageStop) and events[-1].stop_reason == "tool_use"


async def test_tool_without_arguments_gets_an_empty_object() -> None:
    async with AnthropicWireFake([Reply(tool_calls=[ToolCall("now", {}, fragments=1)])]) as fake:
        events = await run(fake, req())
    stop = next(e for e in events if isinstance(e, ToolUseStop))
    assert stop.input == {}


@pytest.mark.parametrize("raw", ['{"city": "Par', "[1, 2]", '"just a string"'])
async def test_invalid_or_non_object_tool_json_is_kept_raw(raw: str) -> None:
    async with AnthropicWireFake([Reply(tool_calls=[ToolCall("f", raw, id="t1")])]) as fake:
        events = await run(fake, req())
    assert ToolUseStop("t1", None, raw) in events


async def test_thinking_and_signature() -> None:
    reply = Reply(thinking="Let me think about it", signature="sig-abc", text="42")
    async with AnthropicWireFake([reply]) as fake:
        events = await run(fake, req())

    thinking = [e for e in events if isinstance(e, ThinkingDelta)]
    assert "".join(t.text for t in thinking) == "Let me think about it"
    assert thinking[-1] == ThinkingDelta("", "sig-abc")
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    assert events.index(thinking[-1]) < first_text


async def test_cache_writes_and_reads_reach_usage() -> None:
    usage = WireUsage(
        input_tokens=12, output_tokens=7, cache_write_tokens=1500, cache_read_tokens=3000
    )
    async with AnthropicWireFake([Reply(text="ok", usage=usage)]) as fake:
        events = await run(fake, req())
    stop = events[-1]
    assert isinstance(stop, MessageStop)
    assert stop.usage == Usage(
        input_tokens=12, output_tokens=7, cache_read_tokens=3000, cache_write_tokens=1500
    )
    assert stop.usage.reported


async def test_message_delta_usage_overrides_message_start() -> None:
    reply = Reply(
        text="ok",
        start_usage=WireUsage(input_tokens=3, output_tokens=1),
        usage=WireUsage(input_tokens=9, output_tokens=40, cache_read_tokens=5),
    )
    async with AnthropicWireFake([reply]) as fake:
        events = await run(fake, req())
    assert events[-1] == MessageStop("end_turn", Usage(9, 40, 5, 0), MODEL)


@pytest.mark.parametrize(
    ("wire", "normalized"),
    [
        ("end_turn", "end_turn"),
        ("max_tokens", "max_tokens"),
        ("stop_sequence", "stop_sequence"),
        ("refusal", "refusal"),
        ("pause_turn", "pause_turn"),
        ("model_context_window_exceeded", "max_tokens"),
    ],
)
async def test_stop_reasons(wire: str, normalized: str) -> None:
    async with AnthropicWireFake([Reply(text="x", stop_reason=wire)]) as fake:
        events = await run(fake, req())
    assert isinstance(events[-1], MessageStop) and events[-1].stop_reason == normalized


async def test_two_calls_reuse_one_provider() -> None:
    async with (
        AnthropicWireFake([Reply(text="one"), Reply(text="two")]) as fake,
        AnthropicProvider(api_key="k", base_url=fake.base_url) as provider,
    ):
        first = [e async for e in provider.stream(req())]
        second = [e async for e in provider.stream(req())]
    assert [e.text for e in first if isinstance(e, TextDelta)] == ["one"]
    assert [e.text for e in second if isinstance(e, TextDelta)] == ["two"]
    assert fake.remaining == 0


# --------------------------------------------------------------------------- request mapping


def rich_request(**kwargs: Any) -> ModelRequest:
    return ModelRequest(
        model=MODEL,
        system=[
            SystemBlock("core rules", name="core", cache=True),
            SystemBlock("org policy", name="org", cache=True),
            SystemBlock("thread instructions", name="thread"),
        ],
        tools=[
            ToolSpec("read", "Read a file", {"type": "object", "properties": {}}),
            ToolSpec("write", "Write a file", {"type": "object", "properties": {}}),
        ],
        messages=[
            user("first question"),
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {"p": "a"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": "data",
                        "is_error": False,
                    },
                    {"type": "text", "text": "and now?"},
                ],
            },
        ],
        **kwargs,
    )


async def test_cache_breakpoints_follow_priority_and_never_exceed_four() -> None:
    request = rich_request()
    snapshot = copy.deepcopy(request)
    async with AnthropicWireFake([Reply(text="ok")]) as fake:
        await run(fake, request)
    body = fake.last_request.body

    assert count_cache_control(body) == MAX_CACHE_BREAKPOINTS
    system, tools, messages = body["system"], body["tools"], body["messages"]
    # 1. the last flagged system layer, 2. the last tool, 3. the last user block,
    # 4. the leftover slot goes to the earlier flagged system layer.
    assert system[1]["cache_control"] == {"type": "ephemeral"}
    assert tools[1]["cache_control"] == {"type": "ephemeral"}
    assert messages[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert system[0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in system[2] and "cache_control" not in tools[0]
    assert request == snapshot  # the caller's request, messages included, is untouched
    assert "cache_control" not in json.dumps(request.messages)


def test_unflagged_system_gets_its_breakpoint_on_the_last_block() -> None:
    request = ModelRequest(
        model=MODEL, system=[SystemBlock("a"), SystemBlock("b")], messages=[user("hi")]
    )
    params = build_params(request)
    assert [("cache_control" in b) for b in params["system"]] == [False, True]
    assert "cache_control" in params["messages"][-1]["content"][-1]
    assert count_cache_control(params) == 2


def test_breakpoint_priority_when_the_budget_is_short() -> None:
    # Five flagged system layers: only one of them may displace tools and messages.
    request = ModelRequest(
        model=MODEL,
        system=[SystemBlock(f"layer {i}", cache=True) for i in range(5)],
        tools=[ToolSpec("t", "d", {"type": "object"})],
        messages=[user("hi")],
    )
    params = build_params(request)
    assert count_cache_control(params) == 4
    assert "cache_control" in params["tools"][-1]
    assert "cache_control" in params["messages"][-1]["content"][-1]
    assert [("cache_control" in b) for b in params["system"]] == [False, False, False, True, True]


def test_markers_from_history_are_replaced_not_added() -> None:
    marked = {"type": "text", "text": "old", "cache_control": {"type": "ephemeral"}}
    request = ModelRequest(
        model=MODEL,
        messages=[
            {"role": "user", "content": [marked] * 5},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            user("new"),
        ],
    )
    params = build_params(request)
    assert count_cache_control(params) == 1
    assert "cache_control" in params["messages"][-1]["content"][0]
    assert marked["cache_control"] == {"type": "ephemeral"}  # not stripped in place


def test_markers_nested_in_tool_results_are_stripped_too() -> None:
    inner = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
    result = {"type": "tool_result", "tool_use_id": "t", "content": [inner] * 5}
    request = ModelRequest(model=MODEL, messages=[{"role": "user", "content": [result]}])
    assert count_cache_control(build_params(request)) == 1


async def test_the_fake_rejects_more_than_four_breakpoints_like_the_api() -> None:
    marked = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
    async with (
        AnthropicWireFake([Reply(text="never")], strict=False) as fake,
        anthropic.AsyncAnthropic(api_key="k", base_url=fake.base_url, max_retries=0) as client,
    ):
        with pytest.raises(anthropic.BadRequestError, match="maximum of 4 blocks"):
            await client.messages.create(
                model=MODEL,
                max_tokens=10,
                messages=cast(Any, [{"role": "user", "content": [marked] * 5}]),
                stream=True,
            )
    assert fake.failures and fake.remaining == 1


def test_no_breakpoints_when_cache_is_off() -> None:
    assert count_cache_control(build_params(rich_request(cache=False))) == 0


async def test_tools_system_and_tool_results_on_the_wire() -> None:
    async with AnthropicWireFake([Reply(text="ok")]) as fake:
        await run(fake, rich_request(cache=False))
    body = fake.last_request.body
    assert body["system"] == [
        {"type": "text", "text": "core rules"},
        {"type": "text", "text": "org policy"},
        {"type": "text", "text": "thread instructions"},
    ]
    assert body["tools"][0] == {
        "name": "read",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {}},
    }
    assert body["messages"][2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": "data",
        "is_error": False,
    }


async def test_metadata_user_id_only_when_set() -> None:
    async with AnthropicWireFake([Reply(text="a"), Reply(text="b")]) as fake:
        await run(fake, req(user_id="thread-7f3a"))
        await run(fake, req())
    assert fake.requests[0].body["metadata"] == {"user_id": "thread-7f3a"}
    assert "metadata" not in fake.requests[1].body


async def test_temperature_is_never_sent() -> None:
    # API version 2026-10-21 answers any sampling parameter with a 400 (the fake does too).
    async with AnthropicWireFake([Reply(text="ok")]) as fake:
        await run(fake, req(temperature=0.2))
    assert "temperature" not in fake.last_request.body


async def test_signed_thinking_goes_back_unsigned_is_dropped() -> None:
    history = [
        user("q1"),
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "signed", "signature": "sig-1"},
                {"type": "thinking", "thinking": "unsigned", "signature": None},
                {"type": "text", "text": ""},
                {"type": "text", "text": "a1"},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "only", "signature": None}],
        },
        user("q2"),
    ]
    async with AnthropicWireFake([Reply(text="ok")]) as fake:
        await run(fake, req(messages=history))
    messages = fake.last_request.body["messages"]
    assert len(messages) == 3  # the assistant turn with only unsigned thinking is gone
    assert messages[1]["content"] == [
        {"type": "thinking", "thinking": "signed", "signature": "sig-1"},
        {"type": "text", "text": "a1"},
    ]


# --------------------------------------------------------------------------- auth and client


async def test_api_key_auth_token_and_default_headers() -> None:
    async with AnthropicWireFake([Reply(text="a"), Reply(text="b")]) as fake:
        await run(fake, req(), api_key="sk-key", default_headers={"x-tenant": "acme"})
        await run(fake, req(), api_key=None, auth_token="proxy-token")
    with_key, with_token = fake.requests
    # SDK 2.x sends an API key as a Bearer token too; there is no x-api-key header any more.
    assert with_key.headers["authorization"] == "Bearer sk-key"
    assert with_key.headers["x-tenant"] == "acme"
    assert "x-api-key" not in with_key.headers
    assert with_token.headers["authorization"] == "Bearer proxy-token"
    assert with_key.headers["anthropic-version"]


async def test_custom_base_url_with_a_path_prefix() -> None:
    class PrefixedFake(AnthropicWireFake):
        endpoint = "/gateway/anthropic/v1/messages"
        base_path = "/gateway/anthropic"

    async with PrefixedFake([Reply(text="ok")]) as fake:
        events = await run(fake, req())
    assert fake.last_request.path == "/gateway/anthropic/v1/messages"
    assert isinstance(events[-1], MessageStop)


async def test_a_caller_supplied_http_client_is_used_and_left_open() -> None:
    async with AnthropicWireFake([Reply(text="ok")]) as fake, httpx2.AsyncClient() as http:
        events = await run(fake, req(), http_client=http)
        assert not http.is_closed
    assert isinstance(events[-1], MessageStop)


@pytest.mark.parametrize(
    "creds", [{}, {"api_key": "k", "auth_token": "t"}], ids=["neither", "both"]
)
def test_exactly_one_credential(creds: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        AnthropicProvider(**creds)


# --------------------------------------------------------------------------- errors


async def test_429_with_retry_after_seconds() -> None:
    error = HttpError(
        429, "Number of request tokens has exceeded your rate limit", headers={"retry-after": "7"}
    )
    async with AnthropicWireFake([error]) as fake:
        exc = await fail(fake)
    assert (exc.kind, exc.retryable, exc.status_code, exc.retry_after) == (
        "rate_limit",
        True,
        429,
        7.0,
    )


async def test_429_with_retry_after_http_date() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    async with AnthropicWireFake(
        [HttpError(429, "slow down", headers={"retry-after": when})]
    ) as fake:
        exc = await fail(fake)
    assert exc.kind == "rate_limit" and exc.retryable
    assert exc.retry_after is not None and 25 <= exc.retry_after <= 31


async def test_spend_limit_429_is_not_retryable() -> None:
    error = HttpError(429, "monthly limit reached", code="enforced_spend_limit_reached")
    async with AnthropicWireFake([error]) as fake:
        exc = await fail(fake)
    assert exc.kind == "rate_limit" and not exc.retryable


@pytest.mark.parametrize(
    ("error", "kind", "retryable"),
    [
        (HttpError(529, "Overloaded"), "overloaded", True),
        (HttpError(500, "Internal server error"), "server", True),
        (HttpError(503, "Service unavailable"), "server", True),
        (HttpError(504, "Gateway timeout"), "timeout", True),
        (HttpError(401, "invalid x-api-key"), "auth", False),
        (HttpError(403, "not allowed"), "auth", False),
        (HttpError(404, "model: claude-nope"), "not_found", False),
        (HttpError(400, "messages.0.content: Field required"), "bad_request", False),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
async def test_http_errors_map_to_kinds(error: HttpError, kind: str, retryable: bool) -> None:
    async with AnthropicWireFake([error]) as fake:
        exc = await fail(fake)
    assert type(exc) is ProviderError
    assert (exc.kind, exc.retryable, exc.status_code) == (kind, retryable, error.status)


@pytest.mark.parametrize(
    "error",
    [
        HttpError(400, "prompt is too long: 208310 tokens > 200000 maximum"),
        HttpError(
            400,
            "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, "
            "decrease input length or `max_tokens` and try again",
        ),
        HttpError(413, "Request exceeds the maximum allowed number of bytes."),
    ],
)
async def test_context_overflow(error: HttpError) -> None:
    async with AnthropicWireFake([error]) as fake:
        exc = await fail(fake)
    assert isinstance(exc, ContextOverflow)
    assert exc.kind == "context_overflow" and not exc.retryable


async def test_error_event_mid_stream_is_retryable() -> None:
    item = StreamError(
        "overloaded_error", "Overloaded", reply=Reply(text="half an answer"), after_events=4
    )
    async with (
        AnthropicWireFake([item]) as fake,
        AnthropicProvider(api_key="k", base_url=fake.base_url) as provider,
    ):
        seen: list[StreamEvent] = []
        with pytest.raises(ProviderError) as info:
            async for event in provider.stream(req()):
                seen.append(event)
    assert any(isinstance(e, TextDelta) for e in seen)  # it really failed mid-stream
    assert (info.value.kind, info.value.retryable) == ("overloaded", True)


async def test_api_error_event_mid_stream_is_a_retryable_server_error() -> None:
    async with AnthropicWireFake([StreamError("api_error", "Internal server error")]) as fake:
        exc = await fail(fake)
    assert (exc.kind, exc.retryable) == ("server", True)


async def test_stream_ending_without_message_stop_is_a_protocol_error() -> None:
    async with AnthropicWireFake([Cut(Reply(text="cut short"), after_events=4)]) as fake:
        exc = await fail(fake)
    assert (exc.kind, exc.retryable) == ("protocol", True)


async def test_dropped_connection_is_a_network_error() -> None:
    async with AnthropicWireFake(
        [Cut(Reply(text="cut short"), after_events=4, abrupt=True)]
    ) as fake:
        exc = await fail(fake)
    assert (exc.kind, exc.retryable) == ("network", True)


@pytest.mark.parametrize("first_event", [True, False], ids=["mid-stream", "before-headers"])
async def test_stalled_stream_times_out(first_event: bool) -> None:
    async with AnthropicWireFake([Hang(send_first_event=first_event)]) as fake:
        with pytest.raises(ProviderError) as info:
            await run(fake, req(), timeout=0.3)
    assert (info.value.kind, info.value.retryable) == ("timeout", True)


async def test_cancelling_the_consumer_closes_the_http_stream() -> None:
    async with (
        AnthropicWireFake([Hang()]) as fake,
        AnthropicProvider(api_key="k", base_url=fake.base_url) as provider,
    ):
        # The hang guarantees the stream never ends.
        async def consume() -> list[StreamEvent]:
            return [event async for event in provider.stream(req())]

        task = asyncio.create_task(consume())
        async with asyncio.timeout(5):
            await fake.wait_for_requests(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(fake.requests[0].client_gone.wait(), 5)


async def test_unreachable_server_is_a_network_error() -> None:
    fake = AnthropicWireFake()
    await fake.start()
    base_url = fake.base_url
    await fake.stop()  # nothing listens on that port any more
    async with AnthropicProvider(api_key="k", base_url=base_url) as provider:
        with pytest.raises(ProviderError) as info:
            await anext(aiter(provider.stream(req())))
    assert (info.value.kind, info.value.retryable) == ("network", True)
