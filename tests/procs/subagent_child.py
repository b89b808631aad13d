"""A process that spawns a subagent whose turn never finishes, then waits to be SIGKILLed.

argv: database_url data_dir parent_thread_id org_id. Prints "RUNNING <child_id>" once the
child's first model call is under way.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator
from uuid import UUID

from ator import Ator, Scope, Settings
from ator.providers.base import ModelRequest, StreamEvent, TextDelta
from ator.subagents.service import Subagents, parse_spawn


class Hang:
    name = "agents"

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.entered.set()
        yield TextDelta("working on it…")
        await asyncio.Event().wait()


async def main() -> None:
    url, data_dir, parent_id, org_id = sys.argv[1:5]
    provider = Hang()
    settings = Settings(database_url=url, data_dir=data_dir, lease_ttl=1.0, reaper_interval=60)
    ator = await Ator.open(settings, providers={"agents": provider})
    scope = Scope(UUID(org_id))
    made = await ator.service(Subagents).spawn(scope, UUID(parent_id), uuid.uuid4(), "toolu_killed",
                                      parse_spawn({"title": "doomed", "task": "work"}))
    await provider.entered.wait()
    print(f"RUNNING {made['id']}", flush=True)
    await asyncio.Event().wait()


asyncio.run(main())
