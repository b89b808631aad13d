"""Voice routes (layer: voice; imports fastapi, starlette, agent.routes, store.records,
voice.service), contributed by the voice extension (`VoiceExtension.routes()`).

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

from ator.agent.routes import Body, require, service
from ator.store.records import Principal
from ator.voice.service import Voice

__all__ = ["VoiceIn", "router"]

router = APIRouter(prefix="/v1")


class VoiceIn(Body):
    """A thread's voice mode: on adds the voice layer (short, spoken style) to its turns."""

    enabled: bool


@router.put("/threads/{thread_id}/voice")
async def set_voice(thread_id: UUID, body: VoiceIn, p: Principal = Depends(require("member")),
                    voice: Voice = Depends(service(Voice))) -> dict[str, Any]:
    await voice.set_mode(p.scope, thread_id, body.enabled)
    return {"id": str(thread_id), "voice": body.enabled}


@router.get("/threads/{thread_id}/speech")
async def speech(thread_id: UUID, turn_id: UUID | None = Query(None),
                 p: Principal = Depends(require("viewer")),
                 voice: Voice = Depends(service(Voice))) -> StreamingResponse:
    spoken = await voice.speak(p.scope, thread_id, turn_id)
    return StreamingResponse(spoken.audio, media_type=spoken.media_type, headers={
        "x-ator-turn-id": str(spoken.turn_id), "x-ator-speech-engine": spoken.engine,
        "cache-control": "no-store"})
