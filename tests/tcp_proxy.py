"""A TCP proxy on loopback that a test can cut (close every connection and refuse new ones)
and restore, as a network partition or a restarted server would (layer: tests).

Used between an `Ator` and its Redis (test_coord_failover) or its PostgreSQL
(test_dependency_loss): the process under test sees its real dependency go away and come
back, with the real client libraries' errors."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["Proxy"]


class Proxy:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.server: asyncio.Server | None = None
        self.port = 0
        self.links: set[asyncio.StreamWriter] = set()

    async def start(self, port: int = 0) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Close every connection and stop listening (new connects are refused)."""
        assert self.server is not None
        self.server.close()
        for writer in list(self.links):
            writer.transport.abort()
        self.links.clear()
        await self.server.wait_closed()

    async def restore(self) -> None:
        await self.start(self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.links.update({writer, up_writer})

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self.links.difference_update({writer, up_writer})
