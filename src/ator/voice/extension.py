"""Voice as an extension of the engine (layer: voice; imports agent.extension, net,
voice.*): the `Voice` service and its speech engine, closed with the engine, its routes, and
the thread's voice mode as a turn's own state (`VoiceMode`: the voice prompt layer)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ator.agent.extension import Extension, Kernel, TurnField
from ator.net import Egress
from ator.voice.engines import engine_for
from ator.voice.mode import VoiceMode
from ator.voice.service import Voice

__all__ = ["VoiceExtension"]


class VoiceExtension(Extension):
    name = "voice"

    def __init__(self, kernel: Kernel) -> None:
        self.engine = engine_for(kernel.settings, Egress.from_settings(kernel.settings))
        self.voice = Voice(kernel.db, kernel.settings, self.engine)

    def fields(self) -> Sequence[TurnField]:
        return [VoiceMode.field()]

    def services(self) -> Mapping[type, object]:
        return {Voice: self.voice}

    def routes(self) -> Sequence[Any]:
        from ator.voice.routes import router  # fastapi: only where an HTTP API mounts it

        return (router,)

    async def aclose(self) -> None:
        await self.engine.aclose()
