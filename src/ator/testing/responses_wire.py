"""A wire-level fake of the OpenAI Responses API (layer: testing; imports testing.wire only).

Speaks `POST /v1/responses` with `stream: true` as the API does — what `codex` (whose only
wire protocol is now this one) and the OpenAI SDK's `responses` client read: named SSE events
each carrying `type` and a `sequence_number`: `response.created`, `response.in_progress`, per
output item `response.output_item.added` … `response.output_item.done` (a `message` with
`response.content_part.added`, `response.output_text.delta`, `response.output_text.done`,
`response.content_part.done`; a `function_call` with `response.function_call_arguments.delta`
and `.done`), then `response.completed` with the whole response and its usage
(`input_tokens` including cached ones, `input_tokens_details.cached_tokens`,
`output_tokens`). Errors use the same envelope as Chat Completions; mid-stream a
`response.failed` event.

The SDK's `base_url` includes `/v1`: the OpenAI SDK appends only `/responses`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any, ClassVar

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

__all__ = ["ResponsesWireFake"]

_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
                404: "invalid_request_error", 429: "requests", 500: "server_error",
                503: "server_error"}


class ResponsesWireFake(WireFake):
    """Fake Responses API server. `base_url` is origin + `/v1`."""

    endpoint: ClassVar[str] = "/v1/responses"
    base_path: ClassVar[str] = "/v1"

    def __init__(self, script: Iterable[ScriptItem] = (), **options: Any) -> None:
        """`options` are WireFake's (chunk_size, strict, responder, max_body_bytes)."""
        super().__init__(script, **options)
        self._response_id = "resp_failed"  # the stream being sent (an error event names it)

    def extra_headers(self) -> dict[str, str]:
        return {"x-request-id": self.next_id("req_fake")}

    def validate(self, request: RecordedRequest) -> tuple[int, str] | None:
        body = request.body
        if not isinstance(body, dict):
            return 400, "request body must be a JSON object"
        if not isinstance(body.get("model"), str):
            return 400, "you must provide a model parameter"
        if not isinstance(body.get("input"), str | list) or not body.get("input"):
            return 400, "input: a string or a non-empty list of items is required"
        if body.get("stream") is not True:
            return 400, "ator wire fake only serves stream: true"
        return None

    def error_body(self, status: int, message: str, error_type: str | None,
                   code: str | None) -> dict[str, Any]:
        return {"error": {"message": message,
                          "type": error_type or _ERROR_TYPES.get(status, "server_error"),
                          "param": None, "code": code}}

    def error_event(self, error: StreamError) -> bytes:
        data = {"type": "response.failed", "sequence_number": 0,
                "response": {"id": self._response_id, "object": "response", "status": "failed",
                             "error": {"code": error.code or "server_error",
                                       "message": error.message}, "output": []}}
        return sse(data, event="response.failed")

    def keepalive_event(self, request: RecordedRequest) -> bytes:
        return b": keepalive\n\n"

    def stream_events(self, reply: Reply, request: RecordedRequest) -> list[bytes]:
        body = request.body if isinstance(request.body, dict) else {}
        model = reply.model or body.get("model") or "gpt-fake"
        response_id = self._response_id = self.next_id("resp_fake")
        seq = itertools.count()
        events: list[bytes] = []

        def emit(kind: str, **data: Any) -> None:
            events.append(sse({"type": kind, "sequence_number": next(seq), **data}, event=kind))

        def response(status: str, output: list[dict[str, Any]],
                     usage: dict[str, Any] | None) -> dict[str, Any]:
            return {"id": response_id, "object": "response", "created_at": 1_700_000_000,
                    "status": status, "model": model, "output": output, "usage": usage,
                    "error": None, "incomplete_details": None, "instructions": None,
                    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                    "metadata": {}, "temperature": None, "top_p": None}

        emit("response.created", response=response("in_progress", [], None))
        emit("response.in_progress", response=response("in_progress", [], None))
        output: list[dict[str, Any]] = []
        if reply.text:
            item_id = self.next_id("msg_fake")
            index = len(output)
            emit("response.output_item.added", output_index=index,
                 item={"id": item_id, "type": "message", "role": "assistant",
                       "status": "in_progress", "content": []})
            emit("response.content_part.added", item_id=item_id, output_index=index,
                 content_index=0, part={"type": "output_text", "text": "", "annotations": []})
            text = ""
            for piece in split_text(reply.text):
                text += piece
                emit("response.output_text.delta", item_id=item_id, output_index=index,
                     content_index=0, delta=piece, logprobs=[])
            part = {"type": "output_text", "text": text, "annotations": []}
            emit("response.output_text.done", item_id=item_id, output_index=index,
                 content_index=0, text=text, logprobs=[])
            emit("response.content_part.done", item_id=item_id, output_index=index,
                 content_index=0, part=part)
            item = {"id": item_id, "type": "message", "role": "assistant",
                    "status": "completed", "content": [part]}
            emit("response.output_item.done", output_index=index, item=item)
            output.append(item)
        for call in reply.tool_calls:
            item_id = self.next_id("fc_fake")
            call_id = call.id or self.next_id("call_fake")
            index = len(output)
            head = {"id": item_id, "type": "function_call", "status": "in_progress",
                    "call_id": call_id, "name": call.name, "arguments": ""}
            emit("response.output_item.added", output_index=index, item=head)
            arguments = tool_arguments(call)
            for fragment in split_fragments(arguments, call.fragments):
                if fragment:
                    emit("response.function_call_arguments.delta", item_id=item_id,
                         output_index=index, delta=fragment)
            emit("response.function_call_arguments.done", item_id=item_id,
                 output_index=index, arguments=arguments)
            item = {**head, "status": "completed", "arguments": arguments}
            emit("response.output_item.done", output_index=index, item=item)
            output.append(item)
        usage = None
        if reply.usage is not None:
            u = reply.usage
            prompt = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
            usage = {"input_tokens": prompt,
                     "input_tokens_details": {"cached_tokens": u.cache_read_tokens},
                     "output_tokens": u.output_tokens,
                     "output_tokens_details": {"reasoning_tokens": 0},
                     "total_tokens": prompt + u.output_tokens}
        emit("response.completed", response=response("completed", output, usage))
        return events
