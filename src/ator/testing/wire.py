"""A real HTTP/1.1 server on 127.0.0.1 that plays a script of model-API responses
(layer: testing; imports the standard library only).

The vendor fakes (`AnthropicWireFake`, `OpenAIWireFake`) subclass `WireFake` and only say how
a script item becomes bytes on the wire. Everything here is vendor-neutral: the script items, the
socket server, request recording and the streaming/hang/cut mechanics.

The server is deliberately hand-rolled on `asyncio.start_server` rather than an ASGI app: a fake
must be able to do what a well-behaved framework will not — stall after the first event, end a
chunked body in the middle of a message, or drop the TCP connection outright.

    async with AnthropicWireFake([Reply(text="hi")]) as fake:
        provider = AnthropicProvider(api_key="k", base_url=fake.base_url)
        ...
        assert fake.requests[0].body["model"] == "m"
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Self

__all__ = [
    "Cut",
    "Hang",
    "HttpError",
    "Keepalives",
    "RecordedRequest",
    "Reply",
    "ScriptItem",
    "StreamError",
    "ToolCall",
    "WireFake",
    "WireUsage",
]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    402: "Payment Required",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    529: "Overloaded",
}


# --------------------------------------------------------------------------- the script


@dataclass(frozen=True, slots=True)
class WireUsage:
    """Token counts a reply reports. `input_tokens` is the *uncached* part of the prompt; each
    fake renders these in its vendor's shape (OpenAI folds cache reads/writes into
    `prompt_tokens` and reports them under `prompt_tokens_details`)."""

    input_tokens: int = 10
    output_tokens: int = 5
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool use in a reply. `input` as a dict is JSON-encoded; as a str it is sent verbatim
    (so a test can send invalid JSON). The encoded text goes out in `fragments` pieces."""

    name: str
    input: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None
    fragments: int = 3


@dataclass(frozen=True, slots=True)
class Reply:
    """A successful streamed assistant message.

    `text`/`thinking` as a str are split into word-sized deltas; as a sequence each item is one
    delta. `stop_reason` is written to the wire verbatim (Anthropic `stop_reason`, OpenAI
    `finish_reason`); left None it is derived from whether there are tool calls.
    `usage=None` makes the OpenAI fake send no usage chunk (the Anthropic fake sends zeros, as
    its protocol has no way to omit usage). `start_usage` overrides what Anthropic's
    `message_start` reports before `message_delta` gives the final numbers.
    """

    text: str | Sequence[str] = ""
    thinking: str | Sequence[str] | None = None
    signature: str | None = None
    tool_calls: Sequence[ToolCall] = ()
    stop_reason: str | None = None
    usage: WireUsage | None = WireUsage()
    start_usage: WireUsage | None = None
    model: str | None = None


@dataclass(frozen=True, slots=True)
class HttpError:
    """An HTTP error response. The body is the vendor's JSON error envelope built from
    `message`, `error_type` (default derived from `status`) and `code`, unless `body` is given
    (a mapping is JSON-encoded, a str sent as is)."""

    status: int
    message: str = "error"
    error_type: str | None = None
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Mapping[str, Any] | str | None = None


@dataclass(frozen=True, slots=True)
class StreamError:
    """A 200 stream that sends the first `after_events` wire events of `reply`, then an error
    event in the vendor's format, then ends."""

    error_type: str = "overloaded_error"
    message: str = "Overloaded"
    code: str | None = None
    reply: Reply = Reply(text="partial answer")
    after_events: int = 2


@dataclass(frozen=True, slots=True)
class Cut:
    """A 200 stream that sends the first `after_events` wire events of `reply` and then ends the
    body cleanly (a terminated chunked body) or, with `abrupt`, drops the TCP connection."""

    reply: Reply = Reply(text="partial answer")
    after_events: int = 3
    abrupt: bool = False


@dataclass(frozen=True, slots=True)
class Hang:
    """Send the response headers and the first wire event of `reply` (or nothing at all, with
    `send_first_event=False`; the first `after_events` events when that is given) and then
    stall until the client goes away or the fake stops. With `keepalive_every`, the stalled
    stream keeps sending the vendor's keepalive event at that interval (seconds): alive, but
    never finishing - only a turn timeout or a stop ends it."""

    send_first_event: bool = True
    reply: Reply = Reply()
    after_events: int | None = None
    keepalive_every: float | None = None

    @property
    def events_before_stall(self) -> int:
        if self.after_events is not None:
            return self.after_events
        return 1 if self.send_first_event else 0


@dataclass(frozen=True, slots=True)
class Keepalives:
    """A streamed `reply` that, after its first `after_events` wire events, sends nothing but
    keepalives (Anthropic `ping`, an OpenAI chunk with an empty delta) every `every` seconds for
    `duration` seconds, then finishes normally. A client whose stall timeout is shorter than
    `duration` but longer than `every` must not give up. With `released`, the keepalives go
    on until that event is set instead (a test orders two model calls without a clock)."""

    reply: Reply = Reply(text="worth the wait")
    after_events: int = 1
    every: float = 0.05
    duration: float = 0.5
    released: asyncio.Event | None = None


ScriptItem = Reply | HttpError | StreamError | Cut | Hang | Keepalives


@dataclass(slots=True)
class RecordedRequest:
    """One request as the fake received it. Header names are lower-cased; `body` is the parsed
    JSON (None if it was not JSON). `client_gone` is set when the client closed the connection
    while the fake was still streaming or hanging this request's response."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any
    client_gone: asyncio.Event = field(default_factory=asyncio.Event)


class _ClientGone(Exception):
    """The peer closed the connection."""


# --------------------------------------------------------------------------- helpers for vendors


def split_text(value: str | Sequence[str]) -> list[str]:
    """Word-sized deltas for a str (whitespace stays attached), the items of a sequence as is."""
    if isinstance(value, str):
        return re.findall(r"\s*\S+\s*|\s+", value) if value else []
    return list(value)


def split_fragments(text: str, pieces: int) -> list[str]:
    """`text` in `pieces` roughly equal consecutive fragments (at least one, never empty ones
    unless `text` is empty)."""
    if not text:
        return [""]
    pieces = max(1, min(pieces, len(text)))
    size, extra = divmod(len(text), pieces)
    out: list[str] = []
    start = 0
    for i in range(pieces):
        end = start + size + (1 if i < extra else 0)
        out.append(text[start:end])
        start = end
    return out


def tool_arguments(call: ToolCall) -> str:
    return call.input if isinstance(call.input, str) else json.dumps(dict(call.input))


# --------------------------------------------------------------------------- the server


class WireFake:
    """The vendor-neutral server. Use a vendor subclass as an async context manager.

    Script items are consumed one per request to `endpoint`, in order; `push` adds more. Once
    the script is empty, `responder(request)` (if given) decides each answer from what was
    sent (a model that calls a tool until told otherwise, say). With `max_body_bytes`, a
    larger request body is refused as a proxy would (413) and recorded as a failure. A
    request to another path, a request the vendor fake finds malformed, or a request after the
    script ran out is answered with a vendor-shaped 4xx/5xx *and* recorded in `failures`;
    leaving the `async with` block raises AssertionError if there are any (unless the block is
    already raising, or `strict=False`).
    """

    endpoint: ClassVar[str] = "/"
    #: what a client puts in front of its own path suffix; `base_url` = origin + this
    base_path: ClassVar[str] = ""

    def __init__(
        self,
        script: Iterable[ScriptItem] = (),
        *,
        chunk_size: int | None = None,
        strict: bool = True,
        responder: Callable[[RecordedRequest], ScriptItem] | None = None,
        max_body_bytes: int | None = None,
    ) -> None:
        self._script: deque[ScriptItem] = deque(script)
        self._responder = responder
        self.max_body_bytes = max_body_bytes
        self._chunk_size = chunk_size
        self._strict = strict
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._stopping = False
        self._ids = itertools.count(1)
        self.port = 0
        self.requests: list[RecordedRequest] = []
        self.failures: list[str] = []
        self._received = asyncio.Condition()

    # -- lifecycle

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
        if exc_type is None and self._strict and self.failures:
            raise AssertionError("wire fake saw bad requests:\n  " + "\n  ".join(self.failures))

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve_connection, "127.0.0.1", 0, limit=1 << 24
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening, drop every open connection (releasing hangs) and wait for them."""
        if self._server is None:
            return
        self._stopping = True
        self._server.close()
        # Aborting the transport ends each handler's pending read with EOF, so handlers finish
        # on their own; cancelling them instead makes asyncio's start_server log the
        # CancelledError as an unhandled callback error.
        for writer in self._connections.values():
            writer.transport.abort()
        if self._connections:
            await asyncio.wait(list(self._connections))
        await self._server.wait_closed()
        self._server = None
        self._stopping = False

    # -- public view

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What to pass as the SDK's `base_url`."""
        return self.origin + self.base_path

    @property
    def last_request(self) -> RecordedRequest:
        return self.requests[-1]

    @property
    def remaining(self) -> int:
        """Script items not yet played."""
        return len(self._script)

    async def wait_for_requests(self, count: int = 1) -> None:
        """Return once `count` requests have arrived (bound it with asyncio.timeout)."""
        async with self._received:
            await self._received.wait_for(lambda: len(self.requests) >= count)

    def push(self, *items: ScriptItem) -> None:
        self._script.extend(items)

    def next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):04d}"

    # -- what vendors implement

    def validate(self, request: RecordedRequest) -> tuple[int, str] | None:
        """(status, message) if the vendor API would reject this request, else None."""
        return None

    def error_body(
        self, status: int, message: str, error_type: str | None, code: str | None
    ) -> Any:
        raise NotImplementedError

    def stream_events(self, reply: Reply, request: RecordedRequest) -> list[bytes]:
        """Every wire event of a successful `reply`, in order, already framed (SSE bytes)."""
        raise NotImplementedError

    def error_event(self, error: StreamError) -> bytes:
        raise NotImplementedError

    def keepalive_event(self, request: RecordedRequest) -> bytes:
        """One wire event that says "still here" and carries nothing."""
        raise NotImplementedError

    def extra_headers(self) -> dict[str, str]:
        return {}

    # -- connection handling

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    break
                keep_alive = await self._respond(request, reader, writer)
                if not keep_alive:
                    break
        except (_ClientGone, ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; nothing to answer
        finally:
            self._connections.pop(task, None)
            if not writer.is_closing():
                writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _read_request(self, reader: asyncio.StreamReader) -> RecordedRequest | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise
            return None  # clean EOF between requests
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, _, value = line.partition(":")
            key = name.strip().lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        if headers.get("transfer-encoding", "").lower() == "chunked":
            raw = await self._read_chunked(reader)
        else:
            raw = await reader.readexactly(int(headers.get("content-length", "0")))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        return RecordedRequest(method=method, path=target, headers=headers, raw=raw, body=body)

    @staticmethod
    async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return b"".join(parts)
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)

    async def _respond(
        self, request: RecordedRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; False when the connection must not be reused."""
        self.requests.append(request)
        async with self._received:
            self._received.notify_all()
        path = request.path.split("?", 1)[0]
        if request.method != "POST" or path != self.endpoint:
            self.failures.append(f"unexpected {request.method} {request.path}")
            await self._send_error(writer, HttpError(404, f"Not found: {request.path}"))
            return True
        if self.max_body_bytes is not None and len(request.raw) > self.max_body_bytes:
            self.failures.append(f"request {len(self.requests)}: body of {len(request.raw)} "
                                 f"bytes over the limit of {self.max_body_bytes}")
            await self._send_error(writer, HttpError(413, "request entity too large"))
            return True
        problem = self.validate(request)
        if problem is not None:
            status, message = problem
            self.failures.append(f"request {len(self.requests)}: {message}")
            await self._send_error(writer, HttpError(status, message))
            return True
        if not self._script and self._responder is None:
            self.failures.append(f"request {len(self.requests)}: script exhausted")
            await self._send_error(writer, HttpError(500, "ator wire fake: script exhausted"))
            return True

        if self._script:
            item = self._script.popleft()
        else:
            assert self._responder is not None
            item = self._responder(request)
        if isinstance(item, HttpError):
            await self._send_error(writer, item)
            return True
        if isinstance(item, Reply):
            await self._start_stream(writer)
            for event in self.stream_events(item, request):
                await self._send_chunk(writer, event, request)
            await self._end_stream(writer)
            return True
        if isinstance(item, StreamError):
            await self._start_stream(writer)
            for event in self.stream_events(item.reply, request)[: item.after_events]:
                await self._send_chunk(writer, event, request)
            await self._send_chunk(writer, self.error_event(item), request)
            await self._end_stream(writer)
            return True
        if isinstance(item, Cut):
            await self._start_stream(writer)
            for event in self.stream_events(item.reply, request)[: item.after_events]:
                await self._send_chunk(writer, event, request)
            if item.abrupt:
                writer.transport.abort()
                return False
            await self._end_stream(writer)
            return True
        if isinstance(item, Keepalives):
            await self._start_stream(writer)
            events = self.stream_events(item.reply, request)
            for event in events[: item.after_events]:
                await self._send_chunk(writer, event, request)
            await self._keep_alive(writer, request, item)
            for event in events[item.after_events :]:
                await self._send_chunk(writer, event, request)
            await self._end_stream(writer)
            return True
        # Hang
        if item.send_first_event or item.after_events:
            await self._start_stream(writer)
            for event in self.stream_events(item.reply, request)[: item.events_before_stall]:
                await self._send_chunk(writer, event, request)
            await self._wait_for_disconnect(reader, request, writer, item.keepalive_every)
        else:
            await self._wait_for_disconnect(reader, request)
        return False

    async def _keep_alive(self, writer: asyncio.StreamWriter, request: RecordedRequest,
                          item: Keepalives) -> None:
        """A keepalive every `item.every` seconds for `item.duration` seconds, or until
        `item.released` is set."""
        # The fake plays a slow model: its pauses are the behaviour under test.
        if item.released is not None:
            while not item.released.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(item.released.wait(), item.every)
                await self._send_chunk(writer, self.keepalive_event(request), request)
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + item.duration
        while loop.time() < until:
            await asyncio.sleep(min(item.every, max(0.0, until - loop.time())))
            await self._send_chunk(writer, self.keepalive_event(request), request)

    async def _wait_for_disconnect(
        self,
        reader: asyncio.StreamReader,
        request: RecordedRequest,
        writer: asyncio.StreamWriter | None = None,
        keepalive_every: float | None = None,
    ) -> None:
        # The client sends nothing more on this connection while it waits for our response, so
        # the next read returns only at EOF: the client closed, or the fake is being stopped.
        # A client that closes with our bytes still unread in its buffer (keepalives piled up
        # on a busy machine) resets the connection instead: the read raises, and that is the
        # client gone too.
        while True:
            try:
                if writer is None or keepalive_every is None:
                    data = await reader.read(65536)
                else:
                    try:
                        async with asyncio.timeout(keepalive_every):
                            data = await reader.read(65536)
                    except TimeoutError:
                        await self._send_chunk(writer, self.keepalive_event(request), request)
                        continue
            except ConnectionError:
                data = b""
            if not data:
                break
        if not self._stopping:
            request.client_gone.set()

    # -- framing

    async def _send_error(self, writer: asyncio.StreamWriter, error: HttpError) -> None:
        if isinstance(error.body, str):
            payload = error.body.encode()
        else:
            body = error.body
            if body is None:
                body = self.error_body(error.status, error.message, error.error_type, error.code)
            payload = json.dumps(body).encode()
        headers = {
            "content-type": "application/json",
            "content-length": str(len(payload)),
            **self.extra_headers(),
            **{k.lower(): v for k, v in error.headers.items()},
        }
        writer.write(self._head(error.status, headers) + payload)
        await writer.drain()

    async def _start_stream(self, writer: asyncio.StreamWriter) -> None:
        headers = {
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache",
            "transfer-encoding": "chunked",
            **self.extra_headers(),
        }
        writer.write(self._head(200, headers))
        await writer.drain()

    async def _send_chunk(
        self, writer: asyncio.StreamWriter, data: bytes, request: RecordedRequest
    ) -> None:
        for piece in self._slices(data):
            writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            try:
                await writer.drain()
            except ConnectionError as exc:
                request.client_gone.set()
                raise _ClientGone from exc

    async def _end_stream(self, writer: asyncio.StreamWriter) -> None:
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    def _slices(self, data: bytes) -> Iterator[bytes]:
        size = self._chunk_size or len(data) or 1
        for start in range(0, len(data), size):
            yield data[start : start + size]

    @staticmethod
    def _head(status: int, headers: Mapping[str, str]) -> bytes:
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def sse(data: Any, event: str | None = None) -> bytes:
    """One Server-Sent Event frame. `data` that is not a str is JSON-encoded."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()
