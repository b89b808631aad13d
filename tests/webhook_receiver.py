"""A webhook receiver on loopback for the tests (a real HTTP server, aiohttp): scripted
statuses per path, every request kept, an event to wait on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1: `answers[path]` is the statuses it gives, in order (the
    last one repeats); every request is kept, and `arrived` is set on each."""

    port: int = 0
    answers: dict[str, list[int]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(Seen(request.path, {k.lower(): v for k, v in request.headers.items()},
                              await request.read()))
        self.arrived.set()
        statuses = self.answers.get(request.path, [200])
        status = statuses.pop(0) if len(statuses) > 1 else statuses[0]
        if status in (301, 302, 307, 308):
            return web.Response(status=status, headers={"Location": self.url("/target")})
        return web.Response(status=status, text=f"answer {status} " + "x" * 5000)

    def at(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.path == path]

    async def wait_for(self, path: str, count: int, timeout: float = 20.0) -> list[Seen]:
        deadline = time.monotonic() + timeout
        while len(self.at(path)) < count:
            left = deadline - time.monotonic()
            assert left > 0, f"{path}: {len(self.at(path))} of {count} requests arrived"
            self.arrived.clear()
            if len(self.at(path)) < count:
                await asyncio.wait_for(self.arrived.wait(), left)
        return self.at(path)


@asynccontextmanager
async def serve_receiver() -> AsyncIterator[Receiver]:
    """`async with serve_receiver() as receiver:` listening on 127.0.0.1 (a free port)."""
    made = Receiver()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", made.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    made.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield made
    finally:
        await runner.cleanup()
