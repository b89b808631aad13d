"""Voice routes (layer: api; imports fastapi, starlette, engine.runtime, voice (the
service), api.*).

`PUT /v1/threads/{id}/voice` (member) turns the thread's voice mode on or off; `GET
/v1/threads/{id}/speech` (viewer) streams a reply as audio (`turn_id` picks one, the latest
by default): `audio/wav` with `X-Ator-Turn-Id` and `X-Ator-Speech-Engine`. Another org's
thread is 404 `not_found`; a thread without a reply is 404 `no_reply`.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query
from starlette.responses import StreamingResponse

from ator.api.auth import get_ator, require
from ator.api.schemas import VoiceIn
from ator.engine.runtime import Ator
from ator.store.records import Principal
from ator.voice import Voice

router = APIRouter(prefix="/v1")


@router.put("/threads/{thread_id}/voice")
async def set_voice(thread_id: UUID, body: VoiceIn, p: Principal = Depends(require("member")),
                    ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    await ator.service(Voice).set_mode(p.scope, thread_id, body.enabled)
    return {"id": str(thread_id), "voice": body.enabled}


@router.get("/threads/{thread_id}/speech")
async def speech(thread_id: UUID, turn_id: UUID | None = Query(None),
                 p: Principal = Depends(require("viewer")),
                 ator: Ator = Depends(get_ator)) -> StreamingResponse:
    spoken = await ator.service(Voice).speak(p.scope, thread_id, turn_id)
    return StreamingResponse(spoken.audio, media_type=spoken.media_type, headers={
        "x-ator-turn-id": str(spoken.turn_id), "x-ator-speech-engine": spoken.engine,
        "cache-control": "no-store"})
