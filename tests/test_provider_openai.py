"""OpenAIProvider through the real `openai` SDK against the wire-level fake."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import httpx2
import pytest

from ator.errors import ContextOverflow, ProviderError
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
from ator.providers.openai import NO_API_KEY, OpenAIProvider, build_params
from ator.testing import (
    Cut,
    Hang,
    HttpError,
    OpenAIWireFake,
    Reply,
    StreamError,
    ToolCall,
    WireUsage,
)

MODEL = "gpt-test"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def req(**kwargs: Any) -> ModelRequest:
    kwargs.setdefault("messages", [user("hi")])
    return ModelRequest(model=MODEL, **kwargs)


async def run(fake: OpenAIWireFake, request: ModelRequest, **kw: Any) -> list[StreamEvent]:
    kw.setdefault("api_key", "sk-test")
    async with OpenAIProvider(base_url=fake.base_url, **kw) as provider:
        return [event async for event in provider.stream(request)]


async def fail(fake: OpenAIWireFake, request: ModelRequest | None = None) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await run(fake, request or req())
    return info.value


# --------------------------------------------------------------------------- streaming


async def test_text_streams_and_usage_is_requested() -> None:
    async with OpenAIWireFake([Reply(text="Hello there, brave new world")]) as fake:
        events = await run(fake, req(max_tokens=123))

    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(texts) > 1 and "".join(texts) == "Hello there, brave new world"
    assert events[-1] == MessageStop("end_turn", Usage(10, 5, 0, 0), MODEL)

    sent = fake.last_request
    assert sent.path == "/v1/chat/completions"
    assert sent.body["stream"] is True
    assert sent.body["stream_options"] == {"include_usage": True}
    assert sent.body["max_tokens"] == 123


async def test_provider_satisfies_the_protocol() -> None:
    async with (
        OpenAIWireFake() as fake,
        OpenAIProvider(api_key="k", base_url=fake.base_url) as provider,
    ):
        assert isinstance(provider, Provider)
        assert provider.name == "openai"


async def test_parallel_tool_calls_split_across_chunks_by_index() -> None:
    calls = [
        ToolCall("get_weather", {"city": "Paris"}, id="call_a", fragments=4),
        ToolCall("get_time", {"tz": "Europe/Paris"}, id="call_b", fragments=3),
    ]
    async with OpenAIWireFake([Reply(tool_calls=calls)]) as fake:
        events = await run(fake, req())

    assert ToolUseStart("call_a", "get_weather") in events
    assert ToolUseStart("call_b", "get_time") in events
    for call_id, expected in (("call_a", {"city": "Paris"}), ("call_b", {"tz": "Europe/Paris"})):
        deltas = [e for e in events if isinstance(e, ToolInputDelta) and e.id == call_id]
        assert len(deltas) > 1
        stop = next(e for e in events if isinstance(e, ToolUseStop) and e.id == call_id)
        assert stop.input == expected
        assert stop.raw == "".join(d.partial_json for d in deltas)
        assert events.index(stop) > events.index(deltas[-1])
    assert isinstance(events[-1], MessageStop) and events[-1].stop_reason == "tool_use"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [('{"city": "Par', None), ("[1, 2]", None), ("", {})],
    ids=["truncated", "not-an-object", "empty"],
)
async def test_tool_argument_parsing(raw: str, expected: dict[str, Any] | None) -> None:
    async with OpenAIWireFake([Reply(tool_calls=[ToolCall("f", raw, id="c1")])]) as fake:
        events = await run(fake, req())
    assert ToolUseStop("c1", expected, raw) in events


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_deltas_become_thinking(field: Any) -> None:
    reply = Reply(thinking="Let me think", text="42")
    async with OpenAIWireFake([reply], reasoning_field=field) as fake:
        events = await run(fake, req())
    thinking = [e for e in events if isinstance(e, ThinkingDelta)]
    assert "".join(t.text for t in thinking) == "Let me think"
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    assert events.index(thinking[-1]) < first_text


async def test_cached_tokens_are_split_out_of_prompt_tokens() -> None:
    usage = WireUsage(input_tokens=100, output_tokens=20, cache_read_tokens=900)
    async with OpenAIWireFake([Reply(text="ok", usage=usage)]) as fake:
        events = await run(fake, req())
    assert events[-1] == MessageStop("end_turn", Usage(100, 20, 900, 0), MODEL)


async def test_cache_write_tokens_when_the_server_reports_them() -> None:
    usage = WireUsage(
        input_tokens=100, output_tokens=20, cache_read_tokens=50, cache_write_tokens=300
    )
    async with OpenAIWireFake([Reply(text="ok", usage=usage)]) as fake:
        events = await run(fake, req())
    assert isinstance(events[-1], MessageStop)
    assert events[-1].usage == Usage(100, 20, 50, 300)


async def test_no_usage_from_the_server_is_flagged_not_guessed() -> None:
    async with OpenAIWireFake([Reply(text="ok", usage=None)]) as fake:
        events = await run(fake, req())
    stop = events[-1]
    assert isinstance(stop, MessageStop)
    assert stop.usage == Usage(reported=False)
    assert stop.usage.total_tokens == 0


@pytest.mark.parametrize(
    ("finish", "tools", "expected"),
    [
        ("stop", False, "end_turn"),
        ("length", False, "max_tokens"),
        ("content_filter", False, "refusal"),
        ("tool_calls", True, "tool_use"),
        ("function_call", True, "tool_use"),
        # llama.cpp / Ollama finish with "stop" even when they called tools
        ("stop", True, "tool_use"),
    ],
)
async def test_finish_reasons(finish: str, tools: bool, expected: str) -> None:
    calls = [ToolCall("f", {"x": 1})] if tools else []
    async with OpenAIWireFake([Reply(text="x", tool_calls=calls, stop_reason=finish)]) as fake:
        events = await run(fake, req())
    assert isinstance(events[-1], MessageStop) and events[-1].stop_reason == expected


# --------------------------------------------------------------------------- request mapping


def conversation() -> ModelRequest:
    return ModelRequest(
        model=MODEL,
        system=[SystemBlock("core rules", cache=True), SystemBlock("thread notes")],
        tools=[ToolSpec("read", "Read a file", {"type": "object", "properties": {"p": {}}})],
        messages=[
            user("look at a and b"),
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "c1", "name": "read", "input": {"p": "a"}},
                    {"type": "tool_use", "id": "c2", "name": "read", "input": {"p": "b"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "c1",
                        "content": "AAA",
                        "is_error": False,
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "c2",
                        "content": "no such file",
                        "is_error": True,
                    },
                    {"type": "text", "text": "so?"},
                ],
            },
        ],
        user_id="thread-7f3a",
        temperature=0.3,
    )


async def test_neutral_messages_become_chat_messages() -> None:
    request = conversation()
    snapshot = copy.deepcopy(request)
    async with OpenAIWireFake([Reply(text="ok")]) as fake:
        await run(fake, request)
    body = fake.last_request.body

    assert body["messages"] == [
        {"role": "system", "content": "core rules\n\nthread notes"},
        {"role": "user", "content": "look at a and b"},
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"p": "a"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"p": "b"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "AAA"},
        {"role": "tool", "tool_call_id": "c2", "content": "ERROR: no such file"},
        {"role": "user", "content": "so?"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {"p": {}}},
            },
        }
    ]
    assert body["user"] == "thread-7f3a"
    assert body["temperature"] == 0.3
    assert request == snapshot


def test_assistant_with_only_tool_calls_has_null_content() -> None:
    request = req(
        messages=[
            user("go"),
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c", "name": "f", "input": {}}],
            },
        ]
    )
    assistant = build_params(request)["messages"][-1]
    assert assistant["content"] is None
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"


async def test_max_completion_tokens_for_servers_that_want_it() -> None:
    async with OpenAIWireFake([Reply(text="ok")]) as fake:
        await run(fake, req(max_tokens=77), max_tokens_param="max_completion_tokens")
    body = fake.last_request.body
    assert body["max_completion_tokens"] == 77 and "max_tokens" not in body


# --------------------------------------------------------------------------- auth and client


async def test_api_key_and_default_headers() -> None:
    async with OpenAIWireFake([Reply(text="ok")]) as fake:
        await run(fake, req(), api_key="sk-real", default_headers={"x-tenant": "acme"})
    assert fake.last_request.headers["authorization"] == "Bearer sk-real"
    assert fake.last_request.headers["x-tenant"] == "acme"


async def test_a_caller_supplied_http_client_is_used_and_left_open() -> None:
    async with OpenAIWireFake([Reply(text="ok")]) as fake, httpx2.AsyncClient() as http:
        events = await run(fake, req(), http_client=http)
        assert not http.is_closed
    assert isinstance(events[-1], MessageStop)


async def test_without_api_key_the_environment_key_is_never_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-operator-secret")
    async with OpenAIWireFake([Reply(text="ok")]) as fake:
        await run(fake, req(), api_key=None)
    assert fake.last_request.headers["authorization"] == f"Bearer {NO_API_KEY}"
    assert "sk-operator-secret" not in str(fake.last_request.headers)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("headers", "expected"),
    [({"retry-after": "3"}, 3.0), ({"retry-after-ms": "1500", "retry-after": "2"}, 1.5)],
)
async def test_429_retry_after(headers: dict[str, str], expected: float) -> None:
    error = HttpError(429, "Rate limit reached", code="rate_limit_exceeded", headers=headers)
    async with OpenAIWireFake([error]) as fake:
        exc = await fail(fake)
    assert (exc.kind, exc.retryable, exc.status_code, exc.retry_after) == (
        "rate_limit",
        True,
        429,
        expected,
    )


async def test_insufficient_quota_is_not_retryable() -> None:
    error = HttpError(
        429,
        "You exceeded your current quota",
        error_type="insufficient_quota",
        code="insufficient_quota",
    )
    async with OpenAIWireFake([error]) as fake:
        exc = await fail(fake)
    assert exc.kind == "rate_limit" and not exc.retryable


@pytest.mark.parametrize(
    "error",
    [
        HttpError(
            400,
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130000 tokens.",
            code="context_length_exceeded",
        ),
        # vLLM: same words, no code
        HttpError(
            400,
            "This model's maximum context length is 4096 tokens. "
            "However, you requested 5000 tokens.",
        ),
        # llama.cpp server
        HttpError(
            400,
            "the request exceeds the available context size",
            error_type="exceed_context_size_error",
        ),
    ],
    ids=["openai", "vllm", "llama.cpp"],
)
async def test_context_overflow(error: HttpError) -> None:
    async with OpenAIWireFake([error]) as fake:
        exc = await fail(fake)
    assert isinstance(exc, ContextOverflow)
    assert exc.kind == "context_overflow" and not exc.retryable


@pytest.mark.parametrize(
    ("error", "kind", "retryable"),
    [
        (HttpError(500, "The server had an error"), "server", True),
        (HttpError(503, "The engine is currently overloaded"), "server", True),
        (HttpError(401, "Incorrect API key provided", code="invalid_api_key"), "auth", False),
        (HttpError(404, "model 'llama9' not found"), "not_found", False),
        (HttpError(400, "Invalid value for 'tools'"), "bad_request", False),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
async def test_http_errors_map_to_kinds(error: HttpError, kind: str, retryable: bool) -> None:
    async with OpenAIWireFake([error]) as fake:
        exc = await fail(fake)
    assert type(exc) is ProviderError
    assert (exc.kind, exc.retryable, exc.status_code) == (kind, retryable, error.status)


async def test_error_object_mid_stream_is_retryable() -> None:
    item = StreamError(
        "server_error", "The server had an error while processing your request.", after_events=3
    )
    async with (
        OpenAIWireFake([item]) as fake,
        OpenAIProvider(api_key="k", base_url=fake.base_url) as provider,
    ):
        seen: list[StreamEvent] = []
        with pytest.raises(ProviderError) as info:
            async for event in provider.stream(req()):
                seen.append(event)
    assert any(isinstance(e, TextDelta) for e in seen)
    assert (info.value.kind, info.value.retryable) == ("server", True)


async def test_stream_ending_without_finish_reason_is_a_protocol_error() -> None:
    async with OpenAIWireFake([Cut(Reply(text="cut short here"), after_events=3)]) as fake:
        exc = await fail(fake)
    assert (exc.kind, exc.retryable) == ("protocol", True)


async def test_dropped_connection_is_a_network_error() -> None:
    async with OpenAIWireFake(
        [Cut(Reply(text="cut short here"), after_events=3, abrupt=True)]
    ) as fake:
        exc = await fail(fake)
    assert (exc.kind, exc.retryable) == ("network", True)


@pytest.mark.parametrize("first_event", [True, False], ids=["mid-stream", "before-headers"])
async def test_stalled_stream_times_out(first_event: bool) -> None:
    async with OpenAIWireFake([Hang(send_first_event=first_event)]) as fake:
        with pytest.raises(ProviderError) as info:
            await run(fake, req(), timeout=0.3)
    assert (info.value.kind, info.value.retryable) == ("timeout", True)


async def test_cancelling_the_consumer_closes_the_http_stream() -> None:
    async with (
        OpenAIWireFake([Hang()]) as fake,
        OpenAIProvider(api_key="k", base_url=fake.base_url) as provider,
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


async def test_a_streamed_call_sends_the_sdk_s_headers_once_each() -> None:
    """The adapter sends with headers taken from the SDK's client once (providers/openai.py
    `_request_head`): its user agent and telemetry, auth, the setup's headers, none twice."""
    heads: list[bytes] = []
    bodies: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        heads.append(head)
        bodies.append(await reader.readexactly(length))
        writer.write(b"HTTP/1.1 503 Unavailable\r\ncontent-type: application/json\r\n"
                     b"content-length: 2\r\n\r\n{}")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with OpenAIProvider(api_key="sk-header-test", base_url=f"http://127.0.0.1:{port}/v1",
                                  default_headers={"X-Setup": "on"}) as provider:
            for _ in range(2):  # the second call reuses what the first built
                with pytest.raises(ProviderError) as caught:
                    async for _event in provider.stream(req()):
                        pass
                assert caught.value.kind == "server" and caught.value.retryable
    finally:
        server.close()
        await server.wait_closed()
    for head, body in zip(heads, bodies, strict=True):
        lines = head.decode().split("\r\n")
        assert lines[0] == "POST /v1/chat/completions HTTP/1.1"
        fields = [line.split(":", 1) for line in lines[1:] if line]
        names = [name.lower() for name, _ in fields]
        assert len(names) == len(set(names)), names
        values = {name.lower(): value.strip() for name, value in fields}
        assert values["authorization"] == "Bearer sk-header-test"
        assert values["user-agent"].startswith("AsyncOpenAI/Python")
        assert values["content-type"] == "application/json"
        assert values["x-setup"] == "on" and "x-stainless-lang" in values
        sent = json.loads(body)
        assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
