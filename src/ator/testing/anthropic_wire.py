"""A wire-level fake of the Anthropic Messages API (layer: testing; imports testing.wire only).

Speaks `POST /v1/messages` with `stream: true` exactly as the API does: `message_start`,
`content_block_start` / `content_block_delta` / `content_block_stop` per block (thinking, text,
tool_use with `input_json_delta` fragments), a `ping`, `message_delta` with the stop reason and
cumulative usage, `message_stop`. Errors use the API's envelope
`{"type": "error", "error": {"type": ..., "message": ...}, "request_id": ...}`, also as an
in-stream `event: error`. It rejects what the real API rejects and tests care about: more than 4
`cache_control` blocks, thinking blocks without a signature, missing auth or version header.

With `prompt_cache=True` the fake also simulates Anthropic's prompt cache, so the input, cache
read and cache write tokens it reports follow from the requests rather than the script: the
prompt is the sequence tools → system → message blocks; every block carrying `cache_control`
stores the prefix ending there (per fake instance, per model); a request reads the longest
stored prefix that ends at or up to 20 blocks before one of its breakpoints, writes the rest
up to its last breakpoint, and pays plain input for what follows. Tokens are bytes of the
canonical JSON ÷ 4. (No minimum cacheable length and no TTL: the real API has both.)

The SDK's `base_url` is the bare origin: the Anthropic SDK appends `/v1/messages` itself.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any, ClassVar

from ator.testing.wire import (
    RecordedRequest,
    Reply,
    ScriptItem,
    StreamError,
    WireFake,
    WireUsage,
    split_fragments,
    split_text,
    sse,
    tool_arguments,
)

__all__ = ["AnthropicWireFake", "PromptCache"]

MAX_CACHE_BREAKPOINTS = 4

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def _count_cache_control(value: Any) -> int:
    if isinstance(value, dict):
        own = 1 if "cache_control" in value else 0
        return own + sum(_count_cache_control(v) for k, v in value.items() if k != "cache_control")
    if isinstance(value, list):
        return sum(_count_cache_control(v) for v in value)
    return 0


#: How many blocks before a breakpoint the API looks for an earlier cached prefix.
LOOKBACK_BLOCKS = 20
BYTES_PER_TOKEN = 4


def _segments(body: dict[str, Any]) -> list[tuple[bytes, bool]]:
    """The prompt as the cache sees it: one segment per tool, system block and message
    block, each with whether it carries a breakpoint."""
    def canonical(value: Any) -> bytes:
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()

    def strip(block: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in block.items() if k != "cache_control"}

    out: list[tuple[bytes, bool]] = []
    for tool in body.get("tools") or []:
        out.append((canonical(strip(tool)), "cache_control" in tool))
    system = body.get("system")
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system or []:
        out.append((canonical(strip(block)), "cache_control" in block))
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for i, block in enumerate(blocks or []):
            head = {"role": message.get("role")} if i == 0 else {}
            out.append((canonical({**head, **strip(block)}), "cache_control" in block))
    return out


class PromptCache:
    """The simulated prompt cache of one fake: hashes of the prefixes stored so far."""

    def __init__(self) -> None:
        self.stored: set[str] = set()

    def usage(self, body: dict[str, Any], output_tokens: int) -> WireUsage:
        """The usage a request reports (and store its breakpoints' prefixes)."""
        digest = hashlib.sha256(str(body.get("model")).encode())
        hashes: list[str] = []
        tokens: list[int] = []
        size = 0
        marks: list[int] = []
        for k, (segment, mark) in enumerate(_segments(body)):
            digest.update(segment)
            hashes.append(digest.copy().hexdigest())
            size += len(segment)
            tokens.append(size // BYTES_PER_TOKEN)
            if mark:
                marks.append(k)
        total = size // BYTES_PER_TOKEN
        read = 0
        for end in marks:
            for k in range(end, max(-1, end - LOOKBACK_BLOCKS - 1), -1):
                if hashes[k] in self.stored:
                    read = max(read, tokens[k])
                    break
        cached_end = tokens[marks[-1]] if marks else 0
        write = max(0, cached_end - read)
        self.stored.update(hashes[k] for k in marks)
        return WireUsage(input_tokens=total - read - write, output_tokens=output_tokens,
                         cache_write_tokens=write, cache_read_tokens=read)


class AnthropicWireFake(WireFake):
    """Fake Anthropic API. `base_url` is the origin (the SDK adds `/v1/messages`).
    `prompt_cache=True` simulates the prompt cache (see the module docstring)."""

    endpoint: ClassVar[str] = "/v1/messages"
    base_path: ClassVar[str] = ""

    def __init__(
        self, script: Iterable[ScriptItem] = (), *, prompt_cache: bool = False, **options: Any
    ) -> None:
        """`options` are WireFake's (chunk_size, strict, responder, max_body_bytes)."""
        super().__init__(script, **options)
        self.cache = PromptCache() if prompt_cache else None

    def extra_headers(self) -> dict[str, str]:
        return {"request-id": self.next_id("req_fake")}

    def validate(self, request: RecordedRequest) -> tuple[int, str] | None:
        headers = request.headers
        if "x-api-key" not in headers and "authorization" not in headers:
            return 401, "x-api-key header is required"
        if "anthropic-version" not in headers:
            return 400, "anthropic-version: header is required"
        body = request.body
        if not isinstance(body, dict):
            return 400, "request body must be a JSON object"
        for key, kind in (("model", str), ("max_tokens", int), ("messages", list)):
            if not isinstance(body.get(key), kind):
                return 400, f"{key}: Field required"
        for key in ("temperature", "top_p", "top_k"):
            if key in body and headers["anthropic-version"] >= "2026-10-21":
                return 400, f"{key}: Extra inputs are not permitted"
        if body.get("stream") is not True:
            return 400, "ator wire fake only serves stream: true"
        if not body["messages"]:
            return 400, "messages: at least one message is required"
        for i, message in enumerate(body["messages"]):
            if message.get("role") not in ("user", "assistant"):
                return 400, f"messages.{i}.role: Input should be 'user' or 'assistant'"
            content = message.get("content")
            if isinstance(content, list):
                for j, block in enumerate(content):
                    if block.get("type") == "thinking" and not block.get("signature"):
                        return 400, f"messages.{i}.content.{j}.thinking.signature: Field required"
                    if block.get("type") == "text" and not block.get("text"):
                        return 400, f"messages.{i}: text content blocks must be non-empty"
        found = _count_cache_control([body.get("system"), body.get("tools"), body["messages"]])
        if found > MAX_CACHE_BREAKPOINTS:
            return 400, (
                f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be "
                f"provided. Found {found}."
            )
        return None

    def error_body(
        self, status: int, message: str, error_type: str | None, code: str | None
    ) -> dict[str, Any]:
        error: dict[str, Any] = {
            "type": error_type or _ERROR_TYPES.get(status, "api_error"),
            "message": message,
        }
        if code is not None:
            error["details"] = {"error_code": code}
        return {"type": "error", "error": error, "request_id": self.next_id("req_fake")}

    def error_event(self, error: StreamError) -> bytes:
        body = self.error_body(500, error.message, error.error_type, error.code)
        return sse(body, "error")

    def keepalive_event(self, request: RecordedRequest) -> bytes:
        return sse({"type": "ping"}, "ping")

    def stream_events(self, reply: Reply, request: RecordedRequest) -> list[bytes]:
        body = request.body if isinstance(request.body, dict) else {}
        model = reply.model or body.get("model") or "claude-fake"
        usage = reply.usage or WireUsage(0, 0, 0, 0)
        if self.cache is not None:
            usage = self.cache.usage(body, usage.output_tokens)
        start = reply.start_usage or WireUsage(
            usage.input_tokens, 1, usage.cache_write_tokens, usage.cache_read_tokens
        )
        events = [
            sse(
                {
                    "type": "message_start",
                    "message": {
                        "id": self.next_id("msg_fake"),
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": _usage(start),
                    },
                },
                "message_start",
            )
        ]
        index = 0
        if reply.thinking is not None:
            events.append(
                _block_start(index, {"type": "thinking", "thinking": "", "signature": ""})
            )
            events.append(sse({"type": "ping"}, "ping"))
            for piece in split_text(reply.thinking):
                events.append(_delta(index, {"type": "thinking_delta", "thinking": piece}))
            if reply.signature is not None:
                events.append(
                    _delta(index, {"type": "signature_delta", "signature": reply.signature})
                )
            events.append(_block_stop(index))
            index += 1
        text = split_text(reply.text)
        if text or not reply.tool_calls:
            events.append(_block_start(index, {"type": "text", "text": ""}))
            if index == 0:
                events.append(sse({"type": "ping"}, "ping"))
            for piece in text:
                events.append(_delta(index, {"type": "text_delta", "text": piece}))
            events.append(_block_stop(index))
            index += 1
        for call in reply.tool_calls:
            events.append(
                _block_start(
                    index,
                    {
                        "type": "tool_use",
                        "id": call.id or self.next_id("toolu_fake"),
                        "name": call.name,
                        "input": {},
                    },
                )
            )
            for fragment in split_fragments(tool_arguments(call), call.fragments):
                events.append(_delta(index, {"type": "input_json_delta", "partial_json": fragment}))
            events.append(_block_stop(index))
            index += 1
        stop_reason = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
        events.append(
            sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": _usage(usage),
                },
                "message_delta",
            )
        )
        events.append(sse({"type": "message_stop"}, "message_stop"))
        return events


def _usage(usage: WireUsage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
        "output_tokens": usage.output_tokens,
    }


def _block_start(index: int, block: dict[str, Any]) -> bytes:
    return sse(
        {"type": "content_block_start", "index": index, "content_block": block},
        "content_block_start",
    )


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    return sse(
        {"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"
    )


def _block_stop(index: int) -> bytes:
    return sse({"type": "content_block_stop", "index": index}, "content_block_stop")
