"""The Anthropic Messages API adapter (layer: providers; imports providers.base, errors and the
`anthropic` SDK with its `httpx2` transport).

`build_params` maps a ModelRequest to the request body (prompt-cache breakpoints included) and is
pure, so the loop can persist exactly what was sent. `AnthropicProvider.stream` sends it with
streaming on and turns the raw SSE events into normalized StreamEvents (every event yields one:
`Keepalive` for pings, `UsageUpdate` for the usage the stream reports). SDK and transport
exceptions are mapped to ProviderError here, once, with a sanitized message (providers/upstream.py);
the SDK never retries (the loop does).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Self

import anthropic
import httpx2

from ator import jsonenc
from ator.errors import AtorError, ConfigError, ContextOverflow, ProviderError
from ator.providers.base import (
    KEEPALIVE,
    NATIVE_BLOCKS,
    STOP_REASONS,
    Message,
    MessageStop,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStart,
    ToolUseStop,
    Usage,
    UsageUpdate,
)
from ator.providers.breakpoints import plan_breakpoints
from ator.providers.retry import retry_after
from ator.providers.upstream import (
    Sent,
    connection_error,
    describe,
    error_fields,
    log_raw,
    ours,
    sent_credentials,
)

__all__ = ["DEFAULT_BASE_URL", "MAX_CACHE_BREAKPOINTS", "AnthropicProvider", "build_params"]

DEFAULT_BASE_URL: Final = "https://api.anthropic.com"
#: The API rejects a request with more blocks carrying cache_control than this.
MAX_CACHE_BREAKPOINTS: Final = 4
_EPHEMERAL: Final = {"type": "ephemeral"}

# 429s that no amount of waiting clears within a turn: spend limits, not rate limits.
_SPEND_LIMIT_CODES: Final = frozenset(
    {"enforced_spend_limit_reached", "contract_spend_limit_reached"}
)
_CONTEXT_OVERFLOW = re.compile(
    r"prompt is too long|too many (?:input )?tokens|context (?:window|limit|length)"
    r"|exceeds? (?:the )?(?:model'?s? )?(?:maximum )?context",
    re.IGNORECASE,
)


# --------------------------------------------------------------------------- request mapping


def build_params(request: ModelRequest) -> dict[str, Any]:
    """The Messages API body (without `stream`) for `request`. Never mutates the request.

    Thinking blocks go back only with their signature (the API rejects unsigned ones); empty
    text blocks are dropped (the API rejects those too), and so is a message left empty.
    `request.temperature` is not sent: API version 2026-10-21, which SDK 2.x speaks, answers
    any sampling parameter with a 400.
    With `request.cache`, at most MAX_CACHE_BREAKPOINTS blocks get `cache_control`, placed
    by `plan_breakpoints` (providers/breakpoints.py): the system prompt, the last tool, the
    latest compaction summary, the latest user message, then earlier flagged system blocks.
    Unknown top-level message keys (the summary marker) are never sent.
    """
    system = [{"type": "text", "text": block.text} for block in request.system if block.text]
    tools = [
        {
            "name": tool.name,
            "description": tool.description,
            "input_schema": copy.deepcopy(tool.input_schema),
        }
        for tool in request.tools
    ]
    kept = [(m, w) for m, w in ((m, _wire_message(m)) for m in request.messages)
            if w["content"]]
    messages = [w for _, w in kept]
    if request.cache:
        _place_breakpoints(request, system, tools, kept)

    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": messages,
    }
    if system:
        params["system"] = system
    if tools:
        params["tools"] = tools
    # No temperature: API version 2026-10-21 (what SDK 2.x speaks) rejects any sampling
    # parameter with a 400, even at its default, so `request.temperature` is ignored here.
    if request.user_id:
        params["metadata"] = {"user_id": request.user_id}
    return params


def _wire_message(message: Message) -> dict[str, Any]:
    content = message.get("content")
    blocks: list[Any] = (
        [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    )
    out: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "thinking":
            if block.get("signature"):
                out.append(
                    {
                        "type": "thinking",
                        "thinking": block.get("thinking", ""),
                        "signature": block["signature"],
                    }
                )
            continue
        if (kind == "text" and not block.get("text")) or kind in NATIVE_BLOCKS:
            continue  # an empty text, or a tool another provider ran itself
        # Our placement is the only one: a marker carried in from history would break the cap.
        out.append(_without_cache_control(block))
    return {"role": message["role"], "content": out}


def _without_cache_control(block: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of `block` without cache_control, also inside a tool_result's block list."""
    out = {k: copy.deepcopy(v) for k, v in block.items() if k != "cache_control"}
    if isinstance(out.get("content"), list):
        out["content"] = [
            _without_cache_control(b) if isinstance(b, dict) else b for b in out["content"]
        ]
    return out


def _place_breakpoints(
    request: ModelRequest,
    system: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    kept: list[tuple[Message, dict[str, Any]]],
) -> None:
    # `system` skips empty layers and `kept` empty messages: plan on what is actually sent.
    flags = [block.cache for block in request.system if block.text]
    for point in plan_breakpoints(flags, len(tools), [m for m, _ in kept],
                                  limit=MAX_CACHE_BREAKPOINTS):
        if point.part == "system":
            block = system[point.index]
        elif point.part == "tools":
            block = tools[point.index]
        else:
            block = kept[point.index][1]["content"][-1]
        block["cache_control"] = dict(_EPHEMERAL)


# --------------------------------------------------------------------------- the provider


class AnthropicProvider:
    """A Provider on `anthropic.AsyncAnthropic` (Messages API, streaming).

    Exactly one of `api_key` and `auth_token` (a Bearer token, for proxies) is required: with
    neither, the SDK would fall back to environment variables and credential files, which must
    never decide what a tenant's request carries. `http_client` must be an `httpx2.AsyncClient`
    (the SDK's transport; it rejects `httpx` objects); when given, the caller owns and closes it.
    Use as an async context manager or call `aclose()`.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        auth_token: str | None = None,
        base_url: str | None = None,
        default_headers: Mapping[str, str] | None = None,
        timeout: float = 600.0,
        http_client: httpx2.AsyncClient | None = None,
        name: str = "anthropic",
    ) -> None:
        if (api_key is None) == (auth_token is None):
            raise ConfigError("anthropic provider needs exactly one of api_key and auth_token")
        self.name = name
        # What an upstream error may never repeat (providers.upstream): the credential sent.
        self._sent = sent_credentials(base_url, api_key, auth_token)
        self._owns_http_client = http_client is None
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key,
            auth_token=auth_token,
            # Always explicit, so ANTHROPIC_BASE_URL in the environment cannot redirect us.
            base_url=base_url or DEFAULT_BASE_URL,
            default_headers=dict(default_headers or {}),
            timeout=httpx2.Timeout(timeout, connect=min(timeout, 10.0)),
            max_retries=0,
            http_client=http_client,
        )

    async def aclose(self) -> None:
        """Close the SDK client and its connection pool (not a caller-supplied http_client)."""
        if self._owns_http_client:
            await self._client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one model call. Raises ProviderError (ContextOverflow for a prompt that does
        not fit); a stream that ends before `message_stop` is a retryable `protocol` error.
        Every server-sent event yields at least one StreamEvent (`Keepalive` for `ping` and
        for events with nothing in them); `UsageUpdate` carries the usage `message_start` and
        `message_delta` report. Closing or cancelling the iterator closes the HTTP response."""
        params = build_params(request)
        try:
            sdk_stream = await self._client.messages.create(
                model=params["model"],
                max_tokens=params["max_tokens"],
                messages=params["messages"],
                system=params.get("system", anthropic.omit),
                tools=params.get("tools", anthropic.omit),
                metadata=params.get("metadata", anthropic.omit),
                stream=True,
            )
        except (anthropic.AnthropicError, httpx2.HTTPError, AtorError) as exc:
            raise _map_error(exc, self._sent) from exc

        # The raw server-sent events, not the SDK's parsed ones: the SDK drops `ping`, and a
        # ping is exactly what must reach the loop's stall watchdog. Parsing a dict per event
        # is also cheaper than building a pydantic model per event.
        state = _StreamState(model=request.model)
        events = anthropic.AsyncStream.raw_events(sdk_stream.response)
        try:
            while True:
                try:
                    sse = await anext(events)
                except StopAsyncIteration:
                    break
                except (
                    anthropic.AnthropicError, httpx2.HTTPError, httpx2.StreamError, AtorError
                ) as exc:
                    raise _map_error(exc, self._sent) from exc
                if sse.event == "error":
                    raise _stream_error(sse.data, sdk_stream.response.status_code, self._sent)
                if sse.event == "ping" or not sse.data:
                    yield KEEPALIVE
                    continue
                try:
                    data = jsonenc.loads(sse.data)
                except json.JSONDecodeError as exc:
                    raise ProviderError(
                        f"anthropic: malformed stream event: {exc.msg} at {exc.pos}",
                        kind="protocol",
                        retryable=True,
                    ) from exc
                out = state.handle(data)
                if not out:
                    yield KEEPALIVE
                for event in out:
                    yield event
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()
            await sdk_stream.close()
        if not state.stopped:
            raise ProviderError(
                "anthropic: stream ended before message_stop", kind="protocol", retryable=True
            )


@dataclass(slots=True)
class _ToolBlock:
    id: str
    parts: list[str] = field(default_factory=list)
    start_input: Any = None


@dataclass(slots=True)
class _StreamState:
    """Folds decoded events into normalized ones; usage fields are cumulative, latest wins.
    An event with nothing for the loop returns [] (the caller sends a Keepalive instead)."""

    model: str
    stop_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    stopped: bool = False
    tools: dict[int, _ToolBlock] = field(default_factory=dict)

    def handle(self, event: Any) -> list[StreamEvent]:
        if not isinstance(event, dict):
            raise ProviderError(
                "anthropic: stream event is not a JSON object", kind="protocol", retryable=True
            )
        kind = event.get("type")
        if kind == "content_block_delta":  # by far the most frequent: first
            return self._delta(event.get("index"), _mapping(event.get("delta")))
        if kind == "content_block_start":
            return self._block_start(event.get("index"), _mapping(event.get("content_block")))
        if kind == "content_block_stop":
            block = self.tools.pop(event.get("index"), None)  # type: ignore[arg-type]
            return [_tool_stop(block)] if block is not None else []
        if kind == "message_start":
            message = _mapping(event.get("message"))
            model = message.get("model")
            self.model = model if isinstance(model, str) and model else self.model
            self._usage(message.get("usage"))
            return [UsageUpdate(self._current_usage())]
        if kind == "message_delta":
            reason = _mapping(event.get("delta")).get("stop_reason")
            self.stop_reason = reason if isinstance(reason, str) else self.stop_reason
            self._usage(event.get("usage"))
            return [UsageUpdate(self._current_usage())]
        if kind == "message_stop":
            self.stopped = True
            return [MessageStop(_stop_reason(self.stop_reason), self._current_usage(), self.model)]
        return []

    def _current_usage(self) -> Usage:
        return Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cache_read_tokens=self.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens,
        )

    def _block_start(self, index: Any, block: dict[str, Any]) -> list[StreamEvent]:
        kind = block.get("type")
        if kind == "tool_use":
            tool_id, name = block.get("id"), block.get("name")
            if not (isinstance(tool_id, str) and isinstance(name, str)):
                raise ProviderError(
                    "anthropic: tool_use block without id or name", kind="protocol", retryable=True
                )
            self.tools[index] = _ToolBlock(id=tool_id, start_input=block.get("input"))
            return [ToolUseStart(id=tool_id, name=name)]
        if kind == "text":
            text = block.get("text")
            return [TextDelta(text)] if isinstance(text, str) and text else []
        if kind == "thinking":
            thinking, signature = block.get("thinking"), block.get("signature")
            thinking = thinking if isinstance(thinking, str) else ""
            signature = signature if isinstance(signature, str) and signature else None
            return [ThinkingDelta(thinking, signature)] if thinking or signature else []
        # redacted_thinking and server-tool blocks have no place in the neutral shape.
        return []

    def _delta(self, index: Any, delta: dict[str, Any]) -> list[StreamEvent]:
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            return [TextDelta(text)] if isinstance(text, str) and text else []
        if kind == "thinking_delta":
            thinking = delta.get("thinking")
            return [ThinkingDelta(thinking)] if isinstance(thinking, str) and thinking else []
        if kind == "signature_delta":
            signature = delta.get("signature")
            return [ThinkingDelta("", signature)] if isinstance(signature, str) else []
        if kind == "input_json_delta":
            block = self.tools.get(index)
            partial = delta.get("partial_json")
            if block is None or not isinstance(partial, str):
                return []
            block.parts.append(partial)
            return [ToolInputDelta(block.id, partial)] if partial else []
        return []

    def _usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        if isinstance(value := usage.get("input_tokens"), int):
            self.input_tokens = value
        if isinstance(value := usage.get("output_tokens"), int):
            self.output_tokens = value
        if isinstance(value := usage.get("cache_read_input_tokens"), int):
            self.cache_read_tokens = value
        if isinstance(value := usage.get("cache_creation_input_tokens"), int):
            self.cache_write_tokens = value


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _tool_stop(block: _ToolBlock) -> ToolUseStop:
    # No input deltas: a tool without arguments, or a proxy that put the input in the start.
    start = block.start_input if isinstance(block.start_input, dict) else {}
    return ToolUseStop.from_json(block.id, "".join(block.parts), empty=start)


def _stop_reason(reason: str | None) -> str:
    if reason in STOP_REASONS:
        return reason
    if reason == "model_context_window_exceeded":
        # Output was cut by the window, not by an error: the loop's max_tokens branch applies.
        return "max_tokens"
    return "end_turn"


# --------------------------------------------------------------------------- error mapping


def _map_error(exc: Exception, sent: Sent) -> AtorError:
    """The one mapping of SDK and transport exceptions. Messages name the failure, never
    repeat an upstream body (see providers/upstream.py); details go to the debug log."""
    if (own := ours("anthropic", exc)) is not None:
        return own
    if isinstance(exc, anthropic.APIStatusError):
        log_raw("anthropic", exc.status_code, exc.body, sent=sent)
        error_type, detail = error_fields(exc.body)
        return _classify(exc.status_code, error_type, _error_code(exc.body), detail,
                         exc.response.headers, sent)
    log_raw("anthropic", None, repr(exc), sent=sent)
    if isinstance(exc, anthropic.APITimeoutError | httpx2.TimeoutException):
        return ProviderError("anthropic: timed out", kind="timeout", retryable=True)
    if isinstance(exc, anthropic.APIConnectionError | httpx2.TransportError):
        return connection_error("anthropic", exc)
    if isinstance(exc, anthropic.APIResponseValidationError | httpx2.StreamError):
        return ProviderError("anthropic: bad response", kind="protocol", retryable=True)
    if isinstance(exc, anthropic.CredentialsError):
        return ProviderError("anthropic: no usable credentials", kind="auth")
    return ProviderError(f"anthropic: {type(exc).__name__}", kind="unknown")


def _stream_error(raw: str, status: int, sent: Sent) -> ProviderError:
    """An `event: error` inside a 200 stream."""
    log_raw("anthropic", status, raw, sent=sent)
    try:
        body = json.loads(raw)
    except json.JSONDecodeError:
        body = None
    error_type, detail = error_fields(body)
    return _classify(status, error_type, _error_code(body), detail, httpx2.Headers(), sent)


def _error_code(body: Any) -> str | None:
    error = body.get("error") if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    code = details.get("error_code") if isinstance(details, dict) else None
    return code if isinstance(code, str) else None


def _classify(
    status: int,
    error_type: str | None,
    error_code: str | None,
    detail: str | None,
    headers: httpx2.Headers,
    sent: Sent,
) -> ProviderError:
    message = describe("anthropic", status, error_type, detail, sent=sent)
    # An `event: error` inside a 200 stream has only the body's error type to go by.
    in_stream = status < 400

    if error_type == "overloaded_error" or status == 529:
        return ProviderError(message, kind="overloaded", retryable=True, status_code=status)
    if error_type == "rate_limit_error" or status == 429:
        spend = error_code in _SPEND_LIMIT_CODES
        return ProviderError(
            message,
            kind="rate_limit",
            retryable=not spend,
            status_code=status,
            retry_after=None if spend else retry_after(headers),
        )
    if error_type == "request_too_large" or status == 413:
        return ContextOverflow(message, status_code=status)
    if error_type == "invalid_request_error" or status == 400:
        if _CONTEXT_OVERFLOW.search(detail or ""):
            return ContextOverflow(message, status_code=status)
        return ProviderError(message, kind="bad_request", status_code=status)
    if error_type in ("authentication_error", "permission_error", "billing_error") or status in (
        401,
        402,
        403,
    ):
        return ProviderError(message, kind="auth", status_code=status)
    if error_type == "not_found_error" or status == 404:
        return ProviderError(message, kind="not_found", status_code=status)
    if error_type == "timeout_error" or status in (408, 504):
        return ProviderError(message, kind="timeout", retryable=True, status_code=status)
    if in_stream or status >= 500:
        return ProviderError(message, kind="server", retryable=True, status_code=status)
    return ProviderError(message, kind="bad_request", status_code=status)
