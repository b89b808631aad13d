"""A process that starts a turn which never finishes, then waits to be SIGKILLed.

argv: database_url data_dir thread_id org_id. Prints "RUNNING <turn_id>" once the turn's
first model call is under way.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from uuid import UUID

from ator import Ator, Scope, Settings
from ator.providers.base import ModelRequest, StreamEvent, TextDelta


class Hang:
    name = "durable"

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.entered.set()
        yield TextDelta("thinking very hard…")
        await asyncio.Event().wait()


async def main() -> None:
    url, data_dir, thread_id, org_id = sys.argv[1:5]
    provider = Hang()
    settings = Settings(database_url=url, data_dir=data_dir, lease_ttl=1.0, reaper_interval=60)
    ator = await Ator.open(settings, providers={"durable": provider})
    scope = Scope(UUID(org_id))
    await ator.submit(scope, UUID(thread_id), "remember the number 7431",
                      client_message_id="before-crash")
    await provider.entered.wait()
    turn = next(iter(ator.actor.running.values())).turn_id
    print(f"RUNNING {turn}", flush=True)
    await asyncio.Event().wait()


asyncio.run(main())
