"""socket.io client managers that fan a room emit out without a task per socket (layer:
realtime; imports socketio, engineio, errors).

python-socketio's managers encode a room emit once but then start one task per recipient;
for an org room of a thousand sockets that is a thousand tasks per turn started or ended.
These put the encoded packet straight into each recipient's transport queue (what the
task would have done), for emits without a callback. `LocalManager` serves one replica;
`RedisManager` is socket.io's Redis manager (every replica's local delivery goes through
the same fast path, after the message crossed Redis).

Rooms given to `deliver_in_background` (the org rooms: every socket of the org, for turns
starting and ending) are delivered in the background, a chunk of recipients per turn of the
event loop, one emit after the other: a burst of turns starting in an org of a thousand sockets is a
thousand sends per turn, and delivered at once they held every token delta behind them
(bench/realtime_latency.py: without the org notices p99 15 ms, with them 145 ms; 73% of
the WebSocket sends were org notices). A socket still gets its org's frames in order, and
the thread room's frames (deltas, persisted events) go out at once.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import engineio  # type: ignore[import-untyped]
import socketio  # type: ignore[import-untyped]

from ator.errors import CoordinationError

__all__ = ["LocalManager", "RedisManager"]


# Recipients of a background room served per turn of the loop (~0.5 ms of sends here): 16
# gave the realtime bench p99 22-34 ms, 64 gave 45 ms.
_CHUNK = 16


class _Background:
    """Background deliveries, in the order they were asked for."""

    def __init__(self) -> None:
        self._todo: deque[tuple[list[Any], list[Any]]] = deque()  # (packets, sockets)
        self._task: asyncio.Task[None] | None = None

    def add(self, packets: list[Any], sockets: list[Any]) -> None:
        self._todo.append((packets, sockets))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(),
                                                                name="ator-room-notices")

    async def _run(self) -> None:
        while self._todo:
            packets, sockets = self._todo[0]
            chunk, rest = sockets[:_CHUNK], sockets[_CHUNK:]
            if rest:
                self._todo[0] = (packets, rest)
            else:
                self._todo.popleft()
            for sock in chunk:
                if not sock.closed:
                    for pkt in packets:
                        sock.queue.put_nowait(pkt)
            await asyncio.sleep(0)  # the writers just woken, and everything else, go first


class _FastFanout(socketio.AsyncManager):  # type: ignore[misc]
    _is_background: Callable[[str], bool] | None = None
    _background: _Background | None = None

    def deliver_in_background(self, rooms: Callable[[str], bool]) -> None:
        """Deliver emits to the rooms `rooms` says yes to in the background (see above)."""
        self._is_background = rooms

    async def emit(self, event: str, data: Any, namespace: str, room: Any = None,
                   skip_sid: Any = None, callback: Any = None, to: Any = None,
                   **kwargs: Any) -> None:
        room = to or room
        if callback is not None or namespace not in self.rooms:
            await super().emit(event, data, namespace, room=room, skip_sid=skip_sid,
                               callback=callback, **kwargs)
            return
        args = list(data) if isinstance(data, tuple) else [] if data is None else [data]
        encoded = self.server.packet_class(socketio.packet.EVENT, namespace=namespace,
                                           data=[event, *args]).encode()
        packets = [engineio.packet.Packet(engineio.packet.MESSAGE, p)
                   for p in (encoded if isinstance(encoded, list) else [encoded])]
        skip = skip_sid if isinstance(skip_sid, list) else [skip_sid]
        sockets = self.server.eio.sockets
        recipients = [sock for sid, eio_sid in self.get_participants(namespace, room)
                      if sid not in skip and (sock := sockets.get(eio_sid)) is not None
                      and not sock.closed]
        if self._is_background is not None and isinstance(room, str) \
                and self._is_background(room):
            if self._background is None:
                self._background = _Background()
            self._background.add(packets, recipients)
            return
        for sock in recipients:
            for pkt in packets:
                sock.queue.put_nowait(pkt)


class LocalManager(_FastFanout):
    pass


class RedisManager(socketio.AsyncRedisManager, _FastFanout):  # type: ignore[misc]
    """socket.io's Redis manager. Once `publish_with(publish)` is given the runtime's
    coordinator, this replica's messages to the others go through it (its bounded pool, its
    pipelined round trips) rather than socket.io's own client, whose pool opens one more
    connection for every emit that finds the others busy: a burst of 1,000 turns opened
    ~700 (each a handshake), for two org-room notices per turn. Listening stays socket.io's
    own subscription."""

    _publish_with: Callable[[str], Awaitable[int]] | None = None

    def publish_with(self, publish: Callable[[str], Awaitable[int]]) -> None:
        """Send through `publish(message)`, which must publish on this manager's channel."""
        self._publish_with = publish

    async def _publish(self, data: Any) -> Any:
        if self._publish_with is None:
            return await super()._publish(data)
        try:
            return await self._publish_with(self.json.dumps(data))
        except CoordinationError:  # as socket.io's own does: logged, the emit goes on
            self._get_logger().error("Cannot publish to redis... giving up", exc_info=True)
            return None
