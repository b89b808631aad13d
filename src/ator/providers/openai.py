"""The Chat Completions adapter for OpenAI and compatible servers — vLLM, llama.cpp server,
Ollama (layer: providers; imports providers.base, providers.size, errors and the `openai` SDK
with its `httpx2` transport).

`build_params` flattens the neutral messages into chat messages and is pure, so the loop can
persist exactly what was sent. `OpenAIProvider.stream` sends them with streaming on (asking for
the final usage chunk) and turns chunks into normalized StreamEvents: every chunk yields at least
one (`Keepalive` for an empty delta), and `UsageUpdate` gives an estimate of the prompt when the
server accepts it and the reported usage when the final chunk comes. SDK and transport
exceptions are mapped to ProviderError here, once, with a sanitized message
(providers/upstream.py); the SDK never retries (the loop does).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Literal, Self

import httpx2
import openai

from ator import jsonenc
from ator.errors import AtorError, ContextOverflow, ProviderError
from ator.providers.base import (
    KEEPALIVE,
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
from ator.providers.retry import retry_after
from ator.providers.size import request_tokens
from ator.providers.sse import data_events
from ator.providers.upstream import (
    Sent,
    connection_error,
    describe,
    error_fields,
    log_raw,
    ours,
    sent_credentials,
)

__all__ = ["DEFAULT_BASE_URL", "NO_API_KEY", "OpenAIProvider", "build_params"]

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"
#: Sent as the Bearer token when no api_key is configured (local servers ignore it). Passing
#: something keeps the SDK from falling back to OPENAI_API_KEY from the process environment,
#: which would hand the operator's key to whatever base_url a setup names.
NO_API_KEY: Final = "ator-no-api-key"

_FINISH_REASONS: Final = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
_CONTEXT_OVERFLOW = re.compile(
    r"context[_ ](?:length|window|size)|maximum context|prompt is too long|too many tokens"
    r"|exceeds? (?:the )?(?:available )?context",
    re.IGNORECASE,
)
# 429s that waiting does not clear: the account is out of money, not over a rate.
_QUOTA_CODES: Final = frozenset({"insufficient_quota", "billing_hard_limit_reached"})


# --------------------------------------------------------------------------- request mapping


def build_params(
    request: ModelRequest,
    *,
    max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
) -> dict[str, Any]:
    """The Chat Completions body (without `stream`/`stream_options`) for `request`.

    System blocks become one system message; a tool_result becomes a `role: tool` message
    (content prefixed "ERROR: " when is_error) placed before the rest of its user message;
    thinking blocks are dropped. Never mutates the request.
    """
    messages: list[dict[str, Any]] = []
    system = "\n\n".join(block.text for block in request.system if block.text)
    if system:
        messages.append({"role": "system", "content": system})
    for message in request.messages:
        messages.extend(_chat_messages(message))

    params: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        max_tokens_param: request.max_tokens,
    }
    if request.tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.input_schema,  # only serialized: no copy needed
                },
            }
            for tool in request.tools
        ]
    if request.temperature is not None:
        params["temperature"] = request.temperature
    if request.user_id:
        params["user"] = request.user_id
    return params


def _chat_messages(message: Message) -> list[dict[str, Any]]:
    role = message["role"]
    content = message.get("content")
    blocks: list[Any] = (
        [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    )
    texts = [b.get("text", "") for b in blocks if b.get("type") == "text" and b.get("text")]
    text = "".join(texts) if role == "assistant" else "\n\n".join(texts)

    if role == "assistant":
        tool_calls = [
            {
                "id": b["id"],
                "type": "function",
                "function": {"name": b["name"], "arguments": json.dumps(b.get("input") or {})},
            }
            for b in blocks
            if b.get("type") == "tool_use"
        ]
        if not text and not tool_calls:
            return []
        out: dict[str, Any] = {"role": "assistant", "content": text or None}
        if tool_calls:
            out["tool_calls"] = tool_calls
        return [out]

    # user: tool messages must directly follow the assistant message that called the tools.
    chat: list[dict[str, Any]] = [
        {
            "role": "tool",
            "tool_call_id": b["tool_use_id"],
            "content": ("ERROR: " if b.get("is_error") else "") + _result_text(b.get("content")),
        }
        for b in blocks
        if b.get("type") == "tool_result"
    ]
    if text:
        chat.append({"role": "user", "content": text})
    return chat


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # Anthropic-style list of text blocks
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
    return "" if content is None else json.dumps(content)


# --------------------------------------------------------------------------- the provider


class OpenAIProvider:
    """A Provider on `openai.AsyncOpenAI` (Chat Completions, streaming).

    `api_key=None` is for servers without auth (see NO_API_KEY). `max_tokens_param` picks the
    field the server understands: `max_tokens` (compatible servers, older OpenAI models) or
    `max_completion_tokens` (OpenAI reasoning models reject `max_tokens`). `http_client` must be
    an `httpx2.AsyncClient` (the SDK rejects `httpx` objects); when given, the caller owns and
    closes it. Use as an async context manager or call `aclose()`.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        default_headers: Mapping[str, str] | None = None,
        timeout: float = 600.0,
        http_client: httpx2.AsyncClient | None = None,
        max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
        name: str = "openai",
    ) -> None:
        self.name = name
        # What an upstream error may never repeat (providers.upstream): the key this sends.
        self._sent = sent_credentials(base_url, api_key)
        self._max_tokens_param = max_tokens_param
        self._owns_http_client = http_client is None
        timeouts = httpx2.Timeout(timeout, connect=min(timeout, 10.0))
        self._client = openai.AsyncOpenAI(
            api_key=api_key or NO_API_KEY,
            # Always explicit, so OPENAI_BASE_URL in the environment cannot redirect us.
            base_url=base_url or DEFAULT_BASE_URL,
            default_headers=dict(default_headers or {}),
            timeout=timeouts,
            max_retries=0,
            http_client=http_client,
        )
        self._timeouts = timeouts.as_dict()
        self._http = self._client._client  # the one given, or the SDK's own
        self._head: tuple[httpx2.URL, list[tuple[str, str]]] | None = None

    async def aclose(self) -> None:
        """Close the SDK client and its connection pool (not a caller-supplied http_client)."""
        if self._owns_http_client:
            await self._client.close()

    def _request_head(self) -> tuple[httpx2.URL, list[tuple[str, str]]]:
        """The URL and headers of every streamed call, taken once from the HTTP client's
        defaults and the SDK's client: its base URL, its default headers (user agent,
        organization and project, the setup's headers) and its auth headers. Building them
        per request (URL parsing, header merging, option models) was more than half of a
        short call's CPU (bench/provider_chunks.py --chunks 1); what the SDK adds per request
        besides is telemetry of retries (none here: max_retries=0) and an idempotency key for
        those retries."""
        if self._head is None:
            base = self._client.base_url  # the SDK keeps it with a trailing slash
            url = base.copy_with(raw_path=base.raw_path + b"chat/completions")
            merged = httpx2.Headers(self._http.headers)  # the HTTP client's own first
            for name, value in {**self._client.default_headers,
                                **self._client.auth_headers}.items():
                if isinstance(value, str):  # not an Omit
                    merged[name] = value
            self._head = (url, list(merged.multi_items()))
        return self._head

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
        not fit); a stream that ends without a finish_reason is a retryable `protocol` error.
        Closing or cancelling the iterator closes the HTTP response."""
        params = build_params(request, max_tokens_param=self._max_tokens_param)
        # Encoded here (orjson): the SDK would encode the body with the standard library's
        # JSON; `content` it sends as it is.
        body = jsonenc.encode({**params, "stream": True,
                               "stream_options": {"include_usage": True}})
        url, headers = self._request_head()
        # The request goes through the SDK's own HTTP client (the egress guard and transport
        # ator gave it); its status errors are the SDK's, made from the response by the SDK.
        # The stream is read here as bytes: building a typed model of every chunk cost more
        # CPU than everything else a streamed turn does (bench/provider_chunks.py), and the
        # SDK's SSE decoder and JSON were most of what was left (bench/scale.py, py-spy).
        outgoing = httpx2.Request("POST", url, headers=headers, content=body,
                                  extensions={"timeout": self._timeouts})
        try:
            response = await self._http.send(outgoing, stream=True)
        except (httpx2.HTTPError, AtorError) as exc:
            raise _map_error(exc, self._sent) from exc
        if not response.is_success:
            try:
                await response.aread()
            except (httpx2.HTTPError, AtorError) as exc:
                raise _map_error(exc, self._sent) from exc
            finally:
                await response.aclose()
            status_error = self._client._make_status_error_from_response(response)
            raise _map_error(status_error, self._sent) from status_error

        # The server accepted the prompt and will bill it, but reports usage only in the last
        # chunk: until then the prompt's size is the best figure for a call cut short.
        yield UsageUpdate(
            Usage(input_tokens=request_tokens(request), reported=False, estimated=True)
        )
        state = _StreamState(model=request.model)
        events = data_events(response.aiter_bytes())
        try:
            while True:
                try:
                    data = await anext(events)
                except StopAsyncIteration:
                    break
                except (httpx2.HTTPError, httpx2.StreamError, AtorError) as exc:
                    raise _map_error(exc, self._sent) from exc
                if data.startswith(b"[DONE]"):
                    # HTTP/1.1 reuses the connection only once the body is read to its end.
                    async for _ in events:
                        pass
                    break
                try:
                    chunk = jsonenc.loads(data)
                except json.JSONDecodeError as exc:
                    raise ProviderError(
                        f"openai: malformed stream chunk: {exc.msg} at {exc.pos}",
                        kind="protocol",
                        retryable=True,
                    ) from exc
                if isinstance(chunk, dict) and chunk.get("error"):
                    raise _stream_error(chunk["error"], self._sent)
                out = state.handle(chunk)
                if not out:
                    yield KEEPALIVE
                for event in out:
                    yield event
        finally:
            await events.aclose()
            await response.aclose()
        if state.finish_reason is None:
            raise ProviderError(
                "openai: stream ended without a finish_reason", kind="protocol", retryable=True
            )
        yield state.message_stop()


@dataclass(slots=True)
class _ToolCall:
    id: str | None = None
    name: str | None = None
    parts: list[str] = field(default_factory=list)
    started: bool = False


@dataclass(slots=True)
class _StreamState:
    model: str
    finish_reason: str | None = None
    refused: bool = False
    usage: dict[str, Any] | None = None
    calls: list[_ToolCall] = field(default_factory=list)
    by_index: dict[int, _ToolCall] = field(default_factory=dict)

    def handle(self, chunk: Any) -> list[StreamEvent]:
        """The events of one chunk (parsed JSON); [] for a chunk with nothing in it (a
        keepalive)."""
        if not isinstance(chunk, dict):
            raise ProviderError("openai: malformed stream chunk", kind="protocol",
                                retryable=True)
        self.model = chunk.get("model") or self.model
        out: list[StreamEvent] = []
        if isinstance(usage := chunk.get("usage"), dict):
            self.usage = usage  # the final usage chunk; some servers send it repeatedly
            out.append(UsageUpdate(self._usage()))
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                out.extend(self._delta(delta))
            finish = choice.get("finish_reason")
            if finish is not None and self.finish_reason is None:
                self.finish_reason = str(finish)
                out.extend(self._finish_tools())
        return out

    def _delta(self, delta: dict[str, Any]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        # vLLM/DeepSeek say reasoning_content, Ollama/OpenRouter say reasoning.
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            out.append(ThinkingDelta(reasoning))
        if isinstance(content := delta.get("content"), str) and content:
            out.append(TextDelta(content))
        if isinstance(refusal := delta.get("refusal"), str) and refusal:
            self.refused = True
            out.append(TextDelta(refusal))
        for call_delta in delta.get("tool_calls") or ():
            if isinstance(call_delta, dict):
                out.extend(self._tool_delta(call_delta))
        return out

    def _tool_delta(self, call_delta: dict[str, Any]) -> list[StreamEvent]:
        index = call_delta.get("index", 0)
        call_id = call_delta.get("id") or None
        call = self.by_index.get(index)
        # Some servers reuse index 0 for every call; a new id at a known index is a new call.
        if call is None or (call_id and call.id and call_id != call.id):
            call = _ToolCall()
            self.by_index[index] = call
            self.calls.append(call)
        out: list[StreamEvent] = []
        if call_id:
            call.id = str(call_id)
        function = call_delta.get("function")
        if not isinstance(function, dict):
            function = {}
        if function.get("name"):
            call.name = str(function["name"])
        if not call.started and call.name is not None and call.id is not None:
            call.started = True
            out.append(ToolUseStart(call.id, call.name))
            # Fragments that arrived before the id and name were both known.
            out.extend(ToolInputDelta(call.id, part) for part in call.parts if part)
        if isinstance(arguments := function.get("arguments"), str) and arguments:
            call.parts.append(arguments)
            if call.started and call.id is not None:
                out.append(ToolInputDelta(call.id, arguments))
        return out

    def _finish_tools(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for call in self.calls:
            if call.name is None:
                continue  # arguments for a function never named: nothing the loop can run
            if call.id is None:
                call.id = f"call_{uuid.uuid4().hex[:24]}"  # servers that omit ids
            if not call.started:
                call.started = True
                out.append(ToolUseStart(call.id, call.name))
                out.extend(ToolInputDelta(call.id, part) for part in call.parts if part)
            out.append(_tool_stop(call.id, "".join(call.parts)))
        return out

    def message_stop(self) -> MessageStop:
        return MessageStop(self._stop_reason(), self._usage(), self.model)

    def _stop_reason(self) -> str:
        if self.refused:
            return "refusal"
        # llama.cpp and Ollama say "stop" even when the message carries tool calls.
        if self.calls and self.finish_reason == "stop":
            return "tool_use"
        return _FINISH_REASONS.get(self.finish_reason or "", "end_turn")

    def _usage(self) -> Usage:
        u = self.usage
        if u is None:
            return Usage(reported=False)
        details = u.get("prompt_tokens_details")
        details = details if isinstance(details, dict) else {}
        cached = _count(details.get("cached_tokens"))
        written = _count(details.get("cache_write_tokens"))
        prompt = _count(u.get("prompt_tokens"))
        return Usage(
            input_tokens=max(0, prompt - cached - written),
            output_tokens=_count(u.get("completion_tokens")),
            cache_read_tokens=cached,
            cache_write_tokens=written,
        )


def _count(value: Any) -> int:
    """A token count from a usage field (absent, null or not a number: 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _tool_stop(call_id: str, raw: str) -> ToolUseStop:
    return ToolUseStop.from_json(call_id, raw)


# --------------------------------------------------------------------------- error mapping


def _map_error(exc: Exception, sent: Sent) -> AtorError:
    """The one mapping of SDK and transport exceptions. Messages name the failure, never
    repeat an upstream body (see providers/upstream.py); details go to the debug log."""
    if (own := ours("openai", exc)) is not None:
        return own
    if isinstance(exc, openai.APIStatusError):
        return _status_error(exc, sent)
    log_raw("openai", None, repr(exc), sent=sent)
    if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
        return ProviderError("openai: timed out", kind="timeout", retryable=True)
    if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
        return connection_error("openai", exc)
    if isinstance(exc, openai.APIResponseValidationError | httpx2.StreamError):
        return ProviderError("openai: bad response", kind="protocol", retryable=True)
    if isinstance(exc, openai.APIError):
        return _stream_error(exc.body, sent)
    return ProviderError(f"openai: {type(exc).__name__}", kind="unknown")


def _envelope(exc: openai.APIStatusError) -> Any:
    """The parsed error body. The SDK keeps only `body["error"]`, and a bare string there
    (Ollama's `{"error": "text"}`) looks like a non-JSON body, so parse the response again."""
    try:
        return json.loads(exc.response.content)
    except (httpx2.ResponseNotRead, ValueError):
        return exc.body if isinstance(exc.body, dict) else None


def _status_error(exc: openai.APIStatusError, sent: Sent) -> ProviderError:
    status = exc.status_code
    body = _envelope(exc)
    log_raw("openai", status, body if body is not None else exc.body, sent=sent)
    error_type, detail = error_fields(body)
    code = _code(body)
    message = describe("openai", status, code or error_type, detail, sent=sent)
    if code == "context_length_exceeded" or status == 413:
        return ContextOverflow(message, status_code=status)
    if status == 429:
        quota = code in _QUOTA_CODES
        return ProviderError(
            message,
            kind="rate_limit",
            retryable=not quota,
            status_code=status,
            retry_after=None if quota else retry_after(exc.response.headers),
        )
    if status == 529:
        return ProviderError(message, kind="overloaded", retryable=True, status_code=status)
    if status in (408, 504):
        return ProviderError(message, kind="timeout", retryable=True, status_code=status)
    if status >= 500:
        return ProviderError(message, kind="server", retryable=True, status_code=status)
    if status in (401, 402, 403):
        return ProviderError(message, kind="auth", status_code=status)
    if status == 404:
        return ProviderError(message, kind="not_found", status_code=status)
    if _CONTEXT_OVERFLOW.search(detail or ""):
        # vLLM, llama.cpp and Ollama say it in words, without OpenAI's code.
        return ContextOverflow(message, status_code=status)
    return ProviderError(message, kind="bad_request", status_code=status)


def _code(body: Any) -> str | None:
    error = body.get("error", body) if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    # Some servers send numeric codes; an identifier is all a tenant may see of it.
    return str(code) if isinstance(code, str | int) and not isinstance(code, bool) else None


def _stream_error(body: object, sent: Sent) -> ProviderError:
    """An `{"error": ...}` object inside a 200 stream: only its type and code to go by."""
    log_raw("openai", None, body, sent=sent)
    error_type, detail = error_fields(body)
    code = _code(body)
    kind_hint = f"{code or ''} {error_type or ''}".lower()
    message = describe("openai", None, code or error_type, detail, sent=sent)
    if "context_length" in kind_hint or _CONTEXT_OVERFLOW.search(detail or ""):
        return ContextOverflow(message)
    if "rate_limit" in kind_hint:
        return ProviderError(message, kind="rate_limit", retryable=True)
    if "overloaded" in kind_hint:
        return ProviderError(message, kind="overloaded", retryable=True)
    if "invalid_request" in kind_hint:
        return ProviderError(message, kind="bad_request")
    return ProviderError(message, kind="server", retryable=True)
