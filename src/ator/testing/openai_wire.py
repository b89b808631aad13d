"""A wire-level fake of an OpenAI-compatible Chat Completions server
(layer: testing; imports testing.wire only).

Speaks `POST /v1/chat/completions` with `stream: true` as OpenAI, vLLM and llama.cpp do:
`data: {chat.completion.chunk}` lines — a role chunk, reasoning deltas (`reasoning_content`, or
`reasoning` as Ollama/OpenRouter spell it), content deltas, tool calls split across chunks by
`index` (the first carrying id, type and name), a finish chunk, then — only when the request
asked for `stream_options.include_usage` and the reply has usage — a usage chunk with empty
`choices`, then `data: [DONE]`. Errors use `{"error": {"message", "type", "param", "code"}}`,
mid-stream as a `data:` line.

The SDK's `base_url` includes `/v1`: the OpenAI SDK appends only `/chat/completions`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Literal

from ator.testing.wire import (
    RecordedRequest,
    Reply,
    ScriptItem,
    StreamError,
    WireFake,
    split_fragments,
    split_text,
    sse,
    tool_arguments,
)

__all__ = ["OpenAIWireFake"]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "requests",
    500: "server_error",
    503: "server_error",
}
_ROLES = ("system", "developer", "user", "assistant", "tool")


class OpenAIWireFake(WireFake):
    """Fake Chat Completions server. `base_url` is origin + `/v1`."""

    endpoint: ClassVar[str] = "/v1/chat/completions"
    base_path: ClassVar[str] = "/v1"

    def __init__(
        self,
        script: Iterable[ScriptItem] = (),
        *,
        reasoning_field: Literal["reasoning_content", "reasoning"] = "reasoning_content",
        **options: Any,
    ) -> None:
        """`options` are WireFake's (chunk_size, strict, responder, max_body_bytes)."""
        super().__init__(script, **options)
        self.reasoning_field = reasoning_field

    def extra_headers(self) -> dict[str, str]:
        return {"x-request-id": self.next_id("req_fake")}

    def validate(self, request: RecordedRequest) -> tuple[int, str] | None:
        body = request.body
        if not isinstance(body, dict):
            return 400, "request body must be a JSON object"
        if not isinstance(body.get("model"), str):
            return 400, "you must provide a model parameter"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return 400, "messages: at least one message is required"
        if body.get("stream") is not True:
            return 400, "ator wire fake only serves stream: true"
        for i, message in enumerate(messages):
            role = message.get("role")
            if role not in _ROLES:
                return 400, f"messages[{i}].role: invalid value {role!r}"
            if role == "tool" and not isinstance(message.get("tool_call_id"), str):
                return 400, f"messages[{i}]: tool messages need a tool_call_id"
            for j, call in enumerate(message.get("tool_calls") or []):
                if not isinstance(call.get("function", {}).get("arguments"), str):
                    return 400, f"messages[{i}].tool_calls[{j}].function.arguments must be a string"
        return None

    def error_body(
        self, status: int, message: str, error_type: str | None, code: str | None
    ) -> dict[str, Any]:
        return {
            "error": {
                "message": message,
                "type": error_type or _ERROR_TYPES.get(status, "server_error"),
                "param": None,
                "code": code,
            }
        }

    def error_event(self, error: StreamError) -> bytes:
        return sse(self.error_body(500, error.message, error.error_type, error.code))

    def keepalive_event(self, request: RecordedRequest) -> bytes:
        # What vLLM and llama.cpp send while a long prompt is processed: a chunk whose delta
        # is empty. (SSE comment lines never reach a client through the SDK.)
        body = request.body if isinstance(request.body, dict) else {}
        return sse(
            {
                "id": "chatcmpl-keepalive",
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": body.get("model") or "gpt-fake",
                "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": None}],
            }
        )

    def stream_events(self, reply: Reply, request: RecordedRequest) -> list[bytes]:
        body = request.body if isinstance(request.body, dict) else {}
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        completion_id = self.next_id("chatcmpl-fake")
        model = reply.model or body.get("model") or "gpt-fake"

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            data: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": model,
                "system_fingerprint": "fp_fake",
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
                ],
            }
            if include_usage:
                data["usage"] = None
            return sse(data)

        events = [chunk({"role": "assistant", "content": ""})]
        if reply.thinking is not None:
            for piece in split_text(reply.thinking):
                events.append(chunk({self.reasoning_field: piece}))
        for piece in split_text(reply.text):
            events.append(chunk({"content": piece}))
        for index, call in enumerate(reply.tool_calls):
            head = {
                "index": index,
                "id": call.id or self.next_id("call_fake"),
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            events.append(chunk({"tool_calls": [head]}))
            for fragment in split_fragments(tool_arguments(call), call.fragments):
                if fragment:
                    events.append(
                        chunk(
                            {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}
                        )
                    )
        finish = reply.stop_reason or ("tool_calls" if reply.tool_calls else "stop")
        events.append(chunk({}, finish))
        if include_usage and reply.usage is not None:
            u = reply.usage
            prompt = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
            details: dict[str, Any] = {"cached_tokens": u.cache_read_tokens, "audio_tokens": 0}
            if u.cache_write_tokens:
                details["cache_write_tokens"] = u.cache_write_tokens
            events.append(
                sse(
                    {
                        "id": completion_id,
                        "object": "chat.completion.chunk",
                        "created": 1_700_000_000,
                        "model": model,
                        "system_fingerprint": "fp_fake",
                        "choices": [],
                        "usage": {
                            "prompt_tokens": prompt,
                            "completion_tokens": u.output_tokens,
                            "total_tokens": prompt + u.output_tokens,
                            "prompt_tokens_details": details,
                            "completion_tokens_details": {"reasoning_tokens": 0},
                        },
                    }
                )
            )
        events.append(sse("[DONE]"))
        return events
