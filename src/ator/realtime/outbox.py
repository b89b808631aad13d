"""A socket's outbox, weighed in bytes and in time (layer: realtime; imports socketio,
engineio).

engine.io keeps every packet bound for one socket in one queue, which the transport's writer
empties (a WebSocket writer takes all it finds, then sends them; a long-poll request takes
them as its answer). `Outbox` is that queue, keeping two facts: `bytes`, the size of what is
waiting, and `stalled_for`, the time since the transport last took a packet while some were
waiting (0 when none wait). A client that stops reading fills its kernel buffers, the writer
blocks in its send, and from then on its outbox only grows and is never taken from: the
socket's stall shows as time, whatever its packets weigh (one frame can be 600 KB, a delta
30 bytes), and the gateway disconnects it after `ATOR_SOCKET_SLOW_TIMEOUT`. A client whose
unread data still fits in the kernel's buffers is not stalled yet as far as any server can
tell; engine.io's heartbeat (ping interval + timeout) ends it.

`Server` is the socket.io server whose engine.io queues are outboxes, and whose WebSocket
writers wait for them without a timer per packet: engine.io's `poll` wraps every wait in
`asyncio.wait_for`, a task and a timer for each packet to each socket, which was most of
the Python a live frame cost per socket (39 us against 10 us for a plain wait, measured on
1,000 queues here). The timeout was a backstop only: a dead peer is found by the pings
(engine.io's and the server's WebSocket keepalive, both end the reader, which unblocks the
writer) and a stalled one by the gateway's sweep (`stalled_for`). Long-polling keeps it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import engineio  # type: ignore[import-untyped]
import engineio.async_socket  # type: ignore[import-untyped]
import socketio  # type: ignore[import-untyped]

__all__ = ["Outbox", "Server"]

_SMALL = 64  # what a packet without text data (a ping, a noop, a close) is counted as


def _size(item: Any) -> int:
    data = getattr(item, "data", None)
    return len(data) if isinstance(data, str | bytes) else _SMALL


class Outbox(asyncio.Queue[Any]):
    """An engine.io socket's packet queue that knows its weight and its stall."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0
        self._waiting_since: float | None = None

    # asyncio.Queue's own hooks (what LifoQueue and PriorityQueue override): every put and
    # get passes here, whether it waited or not.
    def _put(self, item: Any) -> None:
        super()._put(item)
        self.bytes += _size(item)
        if self._waiting_since is None:
            self._waiting_since = time.monotonic()

    def _get(self) -> Any:
        item = super()._get()
        self.bytes -= _size(item)
        self._waiting_since = time.monotonic() if self.qsize() else None
        return item

    def stalled_for(self, now: float | None = None) -> float:
        """Seconds since the transport last took a packet while some were waiting."""
        if self._waiting_since is None:
            return 0.0
        return (time.monotonic() if now is None else now) - self._waiting_since


class _Socket(engineio.async_socket.AsyncSocket):  # type: ignore[misc]
    async def poll(self) -> list[Any]:
        if not self.upgraded:  # long-polling: engine.io's own, with its timeout
            packets: list[Any] = await super().poll()
            return packets
        first = await self.queue.get()
        self.queue.task_done()
        if first is None:
            return []
        out = [first]
        queue: Outbox = self.queue
        while queue.qsize():  # what else is waiting goes in the same write burst
            pkt = queue.get_nowait()
            queue.task_done()
            if pkt is None:
                queue.put_nowait(None)  # the end, seen again by the next poll
                break
            out.append(pkt)
        return out


class _Sockets(dict[str, Any]):
    """engine.io's socket table; every socket it registers becomes a `_Socket` (engine.io
    builds `AsyncSocket` by name, with no factory to override; `_Socket` adds no state)."""

    def __setitem__(self, sid: str, sock: Any) -> None:
        if type(sock) is engineio.async_socket.AsyncSocket:
            sock.__class__ = _Socket
        super().__setitem__(sid, sock)


class _Engine(engineio.AsyncServer):  # type: ignore[misc]
    # engine.io assigns a fresh table at start and when it disconnects everyone.
    @property
    def sockets(self) -> _Sockets:
        return self._sockets

    @sockets.setter
    def sockets(self, table: dict[str, Any]) -> None:
        self._sockets = table if isinstance(table, _Sockets) else _Sockets(table)

    def create_queue(self, *args: Any, **kwargs: Any) -> Outbox:
        return Outbox()


class Server(socketio.AsyncServer):  # type: ignore[misc]
    """socket.io's AsyncServer, its sockets' queues being `Outbox`es."""

    def _engineio_server_class(self) -> type[engineio.AsyncServer]:
        return _Engine
