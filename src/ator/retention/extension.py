"""Retention as an extension of the engine (layer: retention; imports agent.extension,
retention.service).

Contributes the job kind `retention.purge`, the `Retention` service and its routes
(retention.routes); when the engine starts it gives every org its purge schedule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ator.agent.extension import Extension, Kernel
from ator.retention.service import Retention

__all__ = ["RetentionExtension"]


class RetentionExtension(Extension):
    name = "retention"

    def __init__(self, kernel: Kernel) -> None:
        self.retention = Retention(kernel.db, kernel.settings)

    def job_kinds(self) -> Sequence[Any]:
        return [self.retention.kind()]

    def services(self) -> Mapping[type, object]:
        return {Retention: self.retention}

    def routes(self) -> Sequence[Any]:
        from ator.retention.routes import router  # fastapi: only where an HTTP API mounts it

        return (router,)

    async def start(self) -> None:
        await self.retention.ensure_schedules()
