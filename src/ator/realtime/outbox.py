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

`Server` is the socket.io server whose engine.io queues are outboxes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import engineio  # type: ignore[import-untyped]
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


class _Engine(engineio.AsyncServer):  # type: ignore[misc]
    def create_queue(self, *args: Any, **kwargs: Any) -> Outbox:
        return Outbox()


class Server(socketio.AsyncServer):  # type: ignore[misc]
    """socket.io's AsyncServer, its sockets' queues being `Outbox`es."""

    def _engineio_server_class(self) -> type[engineio.AsyncServer]:
        return _Engine
