"""Replica A of a two-process test: runs one turn that streams a reply in several pieces,
with Redis as the coordinator, then exits.

argv: database_url data_dir redis_url redis_prefix thread_id org_id. Prints "DONE <turn_id>".
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from uuid import UUID

from ator import Ator, Scope, Settings
from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage

PIECES = ["one ", "two ", "three ", "four"]


class Pieces:
    name = "pieces"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        for piece in PIECES:
            yield TextDelta(piece)
            await asyncio.sleep(0.1)  # longer than the publisher's coalescing window
        yield MessageStop("end_turn", Usage(3, 4), request.model)


async def main() -> None:
    url, data_dir, redis_url, prefix, thread_id, org_id = sys.argv[1:7]
    settings = Settings(database_url=url, data_dir=data_dir, redis_url=redis_url,
                        redis_prefix=prefix, lease_ttl=5.0)
    ator = await Ator.open(settings, providers={"pieces": Pieces()})
    try:
        result = await ator.ask(Scope(UUID(org_id)), UUID(thread_id), "count", timeout=30)
        print(f"DONE {result.turn_id}", flush=True)
    finally:
        await ator.close()


asyncio.run(main())
