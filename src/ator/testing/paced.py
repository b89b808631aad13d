"""A load-test model: an OpenAI-compatible Chat Completions server on asyncio that streams
every reply over a fixed wall time, for any number of requests at once (layer: testing;
imports the standard library only).

The scripted wire fakes (`testing.wire`) play one script item per request and record every
request for assertions; this one plays the same reply to everyone, records only counters, and
spreads each reply's chunks evenly over `duration` seconds, like a model that streams for that
long. It holds thousands of concurrent streams on one event loop.

    async with PacedModel(duration=2.0) as model:      # or: python -m ator.testing.paced
        setup config: {"base_url": model.base_url}     # provider "openai", any model name
        ...
        model.peak_in_flight, model.served
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import time
from types import TracebackType
from typing import Any, Self

__all__ = ["PacedModel"]

_DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog. " * 4


class PacedModel:
    """The server. `base_url` (origin + `/v1`) is what the OpenAI SDK takes."""

    def __init__(
        self,
        *,
        duration: float = 2.0,
        chunks: int = 20,
        text: str = _DEFAULT_TEXT,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if duration < 0 or chunks < 1:
            raise ValueError("duration must be >= 0 and chunks >= 1")
        self.duration = duration
        self.chunks = chunks
        self.text = text
        self.host = host
        self.port = port
        self.served = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        self.stream_seconds: list[float] = []  # wall time of each completed stream
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port,
                                                  backlog=4096, limit=1 << 24)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await self._server.wait_closed()
        self._server = None

    def _pieces(self) -> list[str]:
        words = self.text.split(" ")
        size = max(1, -(-len(words) // self.chunks))
        return [" ".join(words[i:i + size]) + " " for i in range(0, len(words), size)]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                path, body = request
                if not path.endswith("/chat/completions"):
                    writer.write(_response(404, b'{"error":{"message":"not found"}}'))
                    await writer.drain()
                    continue
                await self._stream(writer, body)
        except (ConnectionError, asyncio.IncompleteReadError):
            return  # the client went away; nothing to tell it
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _stream(self, writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            model = str(body.get("model") or "paced")
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n")
            pieces = self._pieces()
            _chunk(writer, _delta(model, {"role": "assistant", "content": ""}, usage))
            step = self.duration / len(pieces)
            for i, piece in enumerate(pieces):
                # The pacing is the behaviour: a model that takes `duration` to answer.
                await asyncio.sleep(max(0.0, began + step * (i + 1) - loop.time()))
                _chunk(writer, _delta(model, {"content": piece}, usage))
                await writer.drain()
            _chunk(writer, _delta(model, {}, usage, finish="stop"))
            if usage:
                tokens = len(self.text) // 4
                _chunk(writer, _sse({
                    "id": "chatcmpl-paced", "object": "chat.completion.chunk",
                    "created": int(time.time()), "model": model, "choices": [],
                    "usage": {"prompt_tokens": 10, "completion_tokens": tokens,
                              "total_tokens": 10 + tokens},
                }))
            _chunk(writer, b"data: [DONE]\n\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            self.served += 1
            self.stream_seconds.append(loop.time() - began)
        finally:
            self.in_flight -= 1


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, Any]] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    raw = await reader.readexactly(length) if length else b""
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        body = {}
    return (parts[1] if len(parts) > 1 else "/"), body if isinstance(body, dict) else {}


def _delta(model: str, delta: dict[str, Any], usage: bool, finish: str | None = None) -> bytes:
    data: dict[str, Any] = {
        "id": "chatcmpl-paced", "object": "chat.completion.chunk", "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if usage:
        data["usage"] = None
    return _sse(data)


def _sse(data: Any) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def _response(status: int, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode() + body


def main(argv: list[str] | None = None) -> None:
    """Run the server until SIGINT/SIGTERM; prints `ready <base_url>` once it listens."""
    parser = argparse.ArgumentParser(prog="python -m ator.testing.paced")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--chunks", type=int, default=20)
    args = parser.parse_args(argv)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with PacedModel(duration=args.duration, chunks=args.chunks,
                              port=args.port) as model:
            print(f"ready {model.base_url}", flush=True)
            await stop.wait()
            print(json.dumps({"served": model.served, "peak_in_flight": model.peak_in_flight}),
                  flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


if __name__ == "__main__":
    main()
