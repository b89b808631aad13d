"""Threads, their messages, events, turns and stop (layer: api).

`POST …/messages` answers 202 with the mailbox item; a resend with the same
`client_message_id` answers 202 with the same item and `created: false`, and runs nothing;
the same id with different content is a 409 `idempotency_conflict`.
`GET …/events?wait=N` is a long-poll that returns as soon as a new event is committed; each
user and org may hold a bounded number at once (429 `too_many_waits`).
`GET /threads?roots_only=true` leaves subagent threads out (each thread says its `parent_id`).
`GET …/events?before=N&limit=M` pages history backwards: the last M events below seq N,
in seq order, with `has_older` (a chat opens on its latest page and scrolls back).
`GET …/tree` is the thread and its subagents, nested, with status, usage and `live`.
`POST …/stop` also stops the thread's subagents (their results are dropped); it says
whether a turn of the thread itself was running: 202 `{"stop": "requested", "running": true}`
or 200 `{"stop": "idle", "running": false}`.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request, Response

from ator.api import views
from ator.api.auth import get_ator, require
from ator.api.limits import WaitSlots
from ator.api.schemas import MessageIn, ThreadIn
from ator.engine.runtime import Ator
from ator.errors import ValidationFailed
from ator.store import cursors
from ator.store.records import Principal

router = APIRouter(prefix="/v1")


@router.post("/threads", status_code=201)
async def create_thread(
    body: ThreadIn, p: Principal = Depends(require("member")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    thread = await ator.create_thread(p.scope, body.setup_id, title=body.title,
                                      instructions=body.instructions, metadata=body.metadata)
    return views.thread(thread, busy=False)


@router.get("/threads")
async def list_threads(
    limit: int = Query(default=50, ge=1, le=200),
    cursor: str | None = Query(default=None, max_length=200),
    setup_id: UUID | None = None,
    parent_id: UUID | None = None,
    roots_only: bool = False,
    p: Principal = Depends(require("viewer")),
    ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    before = cursors.decode(cursor) if cursor else None
    found = await ator.threads(p.scope, limit=limit + 1, before=before, setup_id=setup_id,
                               parent_id=parent_id, roots_only=roots_only)
    page, next_cursor = cursors.page_of(found, limit)
    busy = await ator.busy_many([t.id for t in page])  # then kept current by the org room
    return {"data": [views.thread(t, busy=b) for t, b in zip(page, busy, strict=True)],
            "next_cursor": next_cursor}


@router.get("/threads/{thread_id}")
async def get_thread(
    thread_id: UUID, p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    thread = await ator.thread(p.scope, thread_id)
    return views.thread(thread, busy=await ator.busy(thread_id))


@router.delete("/threads/{thread_id}")
async def delete_thread(
    thread_id: UUID, p: Principal = Depends(require("member")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    await ator.delete_thread(p.scope, thread_id)
    return {"id": str(thread_id), "deleted": True}


@router.post("/threads/{thread_id}/messages", status_code=202)
async def post_message(
    thread_id: UUID, body: MessageIn, p: Principal = Depends(require("member")),
    ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    item, created = await ator.submit(p.scope, thread_id, body.text,
                                      client_message_id=body.client_message_id)
    return views.item(item, created=created)


@router.get("/threads/{thread_id}/events")
async def list_events(
    thread_id: UUID,
    after_seq: int = Query(default=0, ge=0, le=2**62),
    limit: int = Query(default=200, ge=1, le=1000),
    wait: float = Query(default=0, ge=0, le=60),
    before: int | None = Query(default=None, ge=1, le=2**62),
    *,
    request: Request,
    p: Principal = Depends(require("viewer")),
    ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    if before is not None:
        return await _events_before(ator, p, thread_id, before=before, after_seq=after_seq,
                                    limit=limit, wait=wait)
    if wait > 0:
        slots: WaitSlots = request.app.state.wait_slots
        with slots.hold(p.org_id, p.user_id):
            frames = await ator.wait_events(p.scope, thread_id, after_seq=after_seq,
                                            timeout=wait, limit=limit)
    else:
        await ator.thread(p.scope, thread_id)
        found = await ator.events(p.scope, thread_id, after_seq=after_seq, limit=limit)
        frames = [views.event(thread_id, e) for e in found]
    last = frames[-1]["seq"] if frames else after_seq
    return {"data": frames, "last_seq": last}


async def _events_before(ator: Ator, p: Principal, thread_id: UUID, *, before: int,
                         after_seq: int, limit: int, wait: float) -> dict[str, Any]:
    """A page of history read backwards: the last `limit` events below `before`."""
    if wait > 0 or after_seq:
        raise ValidationFailed("before pages backwards; it cannot be combined with "
                               "after_seq or wait", code="invalid_query")
    found, older = await ator.events_before(p.scope, thread_id, before=before, limit=limit)
    return {"data": [views.event(thread_id, e) for e in found],
            "last_seq": found[-1].seq if found else None, "has_older": older}


@router.get("/threads/{thread_id}/turns")
async def list_turns(
    thread_id: UUID,
    limit: int = Query(default=50, ge=1, le=200),
    p: Principal = Depends(require("viewer")),
    ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    await ator.thread(p.scope, thread_id)
    return {"data": [views.turn(t) for t in await ator.turns(p.scope, thread_id, limit=limit)]}


@router.get("/threads/{thread_id}/tree")
async def get_tree(
    thread_id: UUID, p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return {"data": views.tree(await ator.tree(p.scope, thread_id))}


@router.get("/turns/{turn_id}")
async def get_turn(
    turn_id: UUID, p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return views.turn(await ator.turn(p.scope, turn_id))


@router.post("/threads/{thread_id}/stop", status_code=202)
async def stop_thread(
    thread_id: UUID, response: Response, p: Principal = Depends(require("member")),
    ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    stopped = await ator.stop(p.scope, thread_id)
    if stopped.running:
        return {"thread_id": str(thread_id), "stop": "requested", "running": True,
                "reason": "cancelled:user", "descendants": stopped.descendants}
    response.status_code = 200
    return {"thread_id": str(thread_id), "stop": "idle", "running": False,
            "descendants": stopped.descendants}
