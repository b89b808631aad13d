"""A wire-level fake of the Anthropic Messages API (layer: testing; imports testing.wire only).

Speaks `POST /v1/messages` with `stream: true` exactly as the API does: `message_start`,
`content_block_start` / `content_block_delta` / `content_block_stop` per block (thinking, text,
tool_use with `input_json_delta` fragments), a `ping`, `message_delta` with the stop reason and
cumulative usage, `message_stop`. Errors use the API's envelope
`{"type": "error", "error": {"type": ..., "message": ...}, "request_id": ...}`, also as an
in-stream `event: error`. It rejects what the real API rejects and tests care about: more than 4
`cache_control` blocks, thinking blocks without a signature, missing auth or version header.

The SDK's `base_url` is the bare origin: the Anthropic SDK appends `/v1/messages` itself.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ator.testing.wire import (
    RecordedRequest,
    Reply,
    StreamError,
    WireFake,
    WireUsage,
    split_fragments,
    split_text,
    sse,
    tool_arguments,
)

__all__ = ["AnthropicWireFake"]

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


class AnthropicWireFake(WireFake):
    """Fake Anthropic API. `base_url` is the origin (the SDK adds `/v1/messages`)."""

    endpoint: ClassVar[str] = "/v1/messages"
    base_path: ClassVar[str] = ""

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
