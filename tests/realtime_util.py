"""Helpers for the realtime tests: a real HTTP server on loopback for an app, events written
and announced the way the engine does (persist, then publish), and a provider whose token
deltas are released by the test."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID

import socketio  # type: ignore[import-untyped]
import sqlalchemy as sa
import uvicorn

from ator import Ator, Scope
from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage
from ator.store import keys as key_store
from ator.store import orgs as org_store
from ator.store.events import append_cte, event_params, to_event
from ator.store.records import Event

__all__ = ["Client", "Gated", "append_notes", "member_key", "serve"]


@asynccontextmanager
async def serve(app: Any) -> AsyncIterator[str]:
    """Run `app` under uvicorn on a loopback port of its own; yields its base URL. The
    socket listens before the server starts, so a client may connect at once."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning",
                                           ws="websockets-sansio"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)
        sock.close()


_SQL: sa.TextClause | None = None


async def append_notes(ator: Ator, scope: Scope, thread_id: UUID, texts: Sequence[str],
                       *, publish: bool = True) -> list[Event]:
    """Commit one `note` event per text in one statement, then announce them (unless not
    `publish`: a notice lost on the way)."""
    global _SQL
    if _SQL is None:
        ctes, insert = append_cte()
        _SQL = sa.text(f"WITH {ctes} {insert}")
    rows = await ator.db.write(_SQL, {
        "org_id": scope.org_id, "thread_id": thread_id, "turn_id": None,
        **event_params([("note", {"text": t}) for t in texts]),
    })
    events = [to_event(r, thread_id) for r in rows]
    if publish:
        await ator.publisher.events(scope, thread_id, events)
    return events


async def member_key(ator: Ator, scope: Scope, role: str = "member") -> str:
    user = await org_store.create_user(ator.db, scope, f"{uuid.uuid4().hex[:8]}@x", role)
    _, key = await key_store.create_key(ator.db, scope, user_id=user, name="k", role=role)
    return key


class Gated:
    """A provider that streams one TextDelta per `release()`, then stops after `pieces`."""

    name = "gated"

    def __init__(self, pieces: int) -> None:
        self.pieces = pieces
        self._gate: asyncio.Queue[None] = asyncio.Queue()

    def release(self, n: int = 1) -> None:
        for _ in range(n):
            self._gate.put_nowait(None)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        for i in range(self.pieces):
            await self._gate.get()
            yield TextDelta(f"p{i} ")
        yield MessageStop("end_turn", Usage(input_tokens=3, output_tokens=self.pieces),
                          request.model)

    async def aclose(self) -> None:
        return None


class Client:
    """A socket.io client that keeps every frame it receives, and waits on them."""

    def __init__(self) -> None:
        self.sio = socketio.AsyncClient(reconnection=False)
        self.frames: list[dict[str, Any]] = []
        self._changed = asyncio.Event()
        self.refused: Any = None  # the problem a refused connect was answered with
        self.sio.on("frame", self._frame)
        self.sio.on("connect_error", self._refused)
        self.gone = asyncio.Event()
        self.sio.on("disconnect", self._gone)

    async def _gone(self, *reason: Any) -> None:
        self.gone.set()

    async def _refused(self, data: Any) -> None:
        self.refused = data

    async def _frame(self, frame: dict[str, Any]) -> None:
        self.frames.append(frame)
        self._changed.set()

    async def connect(self, base: str, key: str | None) -> None:
        await self.sio.connect(base, transports=["websocket"], wait_timeout=10,
                               auth={"key": key} if key else None)

    async def call(self, command: str, **payload: Any) -> dict[str, Any]:
        answer: dict[str, Any] = await self.sio.call(command, payload, timeout=10)
        return answer

    async def until(self, test: Callable[[list[dict[str, Any]]], bool],
                    timeout: float = 15.0) -> list[dict[str, Any]]:
        async with asyncio.timeout(timeout):
            while not test(self.frames):
                self._changed.clear()
                await self._changed.wait()
        return self.frames

    def persisted(self, thread_id: Any = None) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["seq"] is not None
                and (thread_id is None or f["data"]["thread_id"] == str(thread_id))]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["type"] == kind]
