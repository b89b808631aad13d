"""socket.io client managers that fan a room emit out without a task per socket (layer:
realtime; imports socketio, engineio).

python-socketio's managers encode a room emit once but then start one task per recipient;
for an org room of a thousand sockets that is a thousand tasks per turn started or ended.
These put the encoded packet straight into each recipient's transport queue (what the
task would have done), for emits without a callback. `LocalManager` serves one replica;
`RedisManager` is socket.io's Redis manager (every replica's local delivery goes through
the same fast path, after the message crossed Redis).
"""

from __future__ import annotations

from typing import Any

import engineio  # type: ignore[import-untyped]
import socketio  # type: ignore[import-untyped]

__all__ = ["LocalManager", "RedisManager"]


class _FastFanout(socketio.AsyncManager):  # type: ignore[misc]
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
        for sid, eio_sid in self.get_participants(namespace, room):
            sock = sockets.get(eio_sid)
            if sid in skip or sock is None or sock.closed:
                continue
            for pkt in packets:
                sock.queue.put_nowait(pkt)


class LocalManager(_FastFanout):
    pass


class RedisManager(socketio.AsyncRedisManager, _FastFanout):  # type: ignore[misc]
    pass
