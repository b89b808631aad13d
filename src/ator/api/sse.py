"""Server-sent events of a thread, for API clients and curl (layer: api; imports
engine.runtime, api.auth, api.limits).

`GET /v1/threads/{id}/stream` answers `text/event-stream`: every persisted event after the
cursor (the `Last-Event-ID` header, else `?after_seq=`, else 0) from the database, then live,
each as

    id: <seq>
    event: <kind>
    data: {"v": 1, "seq": <seq>, "type": <kind>, "data": {...}}

and token deltas as `event: delta` with no `id` (volatile; a resume never replays them). A
comment line is sent every `keepalive` seconds of silence. A stream holds one of the
caller's wait slots (429 `too_many_waits` past the cap) for as long as it is open.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import StreamingResponse

from ator import jsonenc
from ator.api.auth import get_ator, require
from ator.api.limits import WaitSlots
from ator.engine.runtime import Ator
from ator.errors import ValidationFailed
from ator.store.records import Principal

__all__ = ["router", "sse", "sse_cursor", "stream_response"]

router = APIRouter(prefix="/v1")

_KEEPALIVE = 15.0


def sse(frame: dict[str, Any]) -> bytes:
    """One frame as an SSE message (persisted ones carry their seq as the event id)."""
    head = f"id: {frame['seq']}\n" if frame["seq"] is not None else ""
    body = jsonenc.dumps(frame)
    return f"{head}event: {frame['type']}\ndata: {body}\n\n".encode()


def sse_cursor(last_event_id: str | None, after_seq: int) -> int:
    if last_event_id is None or not last_event_id.strip():
        return after_seq
    try:
        seq = int(last_event_id.strip())
    except ValueError as exc:
        raise ValidationFailed("Last-Event-ID must be an event seq",
                               code="invalid_cursor") from exc
    if not 0 <= seq <= 2**62:
        raise ValidationFailed("Last-Event-ID is out of range", code="invalid_cursor")
    return seq


@router.get("/threads/{thread_id}/stream")
async def stream_thread(
    thread_id: UUID,
    request: Request,
    after_seq: int = Query(default=0, ge=0, le=2**62),
    deltas: bool = Query(default=True),
    last_event_id: str | None = Header(default=None, max_length=32),
    p: Principal = Depends(require("viewer")),
    ator: Ator = Depends(get_ator),
) -> StreamingResponse:
    cursor = sse_cursor(last_event_id, after_seq)
    slots: WaitSlots = request.app.state.wait_slots
    held = contextlib.ExitStack()
    held.enter_context(slots.hold(p.org_id, p.user_id))
    try:
        frames = await ator.thread_frames(p.scope, thread_id, after_seq=cursor, deltas=deltas,
                                          keepalive=_KEEPALIVE)
    except BaseException:
        held.close()
        raise

    return stream_response(frames, held, "thread")


def stream_response(frames: AsyncGenerator[dict[str, Any] | None, None],
                    held: contextlib.ExitStack, what: str) -> StreamingResponse:
    """Frames as a `text/event-stream` (None frames as keepalive comments); `held` (the
    caller's wait slot) is let go when the stream ends."""

    async def body() -> AsyncIterator[bytes]:
        with held:
            try:
                yield f": stream of {what} events\n\n".encode()
                async for frame in frames:
                    yield b": keepalive\n\n" if frame is None else sse(frame)
            finally:
                await frames.aclose()

    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
