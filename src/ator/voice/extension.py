"""Voice as an extension of the engine (layer: voice; imports agent.extension, net,
voice.*): the `Voice` service and its speech engine, closed with the engine, and its routes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ator.agent.extension import Extension, Kernel
from ator.net import Egress
from ator.voice.engines import engine_for
from ator.voice.service import Voice

__all__ = ["VoiceExtension"]


class VoiceExtension(Extension):
    name = "voice"

    def __init__(self, kernel: Kernel) -> None:
        self.engine = engine_for(kernel.settings, Egress.from_settings(kernel.settings))
        self.voice = Voice(kernel.db, kernel.settings, self.engine)

    def services(self) -> Mapping[type, object]:
        return {Voice: self.voice}

    def routes(self) -> Sequence[Any]:
        from ator.voice.routes import router  # fastapi: only where an HTTP API mounts it

        return (router,)

    async def aclose(self) -> None:
        await self.engine.aclose()
