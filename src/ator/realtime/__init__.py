"""Realtime transport: the socket.io gateway (layer: realtime, below api and cli, above
engine; imports engine, store.keys, socketio)."""

from __future__ import annotations

from ator.realtime.sockets import SocketRoute, SocketServer

__all__ = ["SocketRoute", "SocketServer"]
