"""Helpers for the realtime tests: a real HTTP server on loopback for an app, events written
and announced the way the engine does (persist, then publish), and a provider whose token
deltas are released by the test."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID

import sqlalchemy as sa
import uvicorn

from ator import Ator, Scope
from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage
from ator.store import keys as key_store
from ator.store import orgs as org_store
from ator.store.events import append_cte, event_params, to_event
from ator.store.records import Event

__all__ = ["Gated", "append_notes", "member_key", "serve"]


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
