"""Single sign-on as an extension of the engine (layer: sso; imports agent.extension, net,
sso.service): the `Sso` service, its HTTP client closed with the engine."""

from __future__ import annotations

from collections.abc import Mapping

from ator.agent.extension import Extension, Kernel
from ator.net import Egress
from ator.sso.service import Sso

__all__ = ["SsoExtension"]


class SsoExtension(Extension):
    name = "sso"

    def __init__(self, kernel: Kernel) -> None:
        self.sso = Sso(kernel.db, kernel.settings, kernel.master_key,
                       Egress.from_settings(kernel.settings))

    def services(self) -> Mapping[type, object]:
        return {Sso: self.sso}

    async def aclose(self) -> None:
        await self.sso.aclose()
