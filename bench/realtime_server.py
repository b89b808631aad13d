"""One replica for bench/realtime_latency.py: `ator serve` with a `tick` provider whose
tokens carry the wall-clock time they were produced (bench helper; imports ator, uvicorn).

    python bench/realtime_server.py PORT TOKENS INTERVAL   (ATOR_* settings from the env)

BENCH_SERVER_GC_THRESHOLD="a,b,c" freezes the objects made at startup and sets Python's GC
thresholds (the full collections of a large heap are what the p99 is made of).

Each model call streams TOKENS text deltas "<unix time> ", one every INTERVAL seconds, then
stops; the engine coalesces and publishes them as usual (engine/publish.py).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator

import uvicorn

from ator.api.app import create_app
from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage
from ator.settings import Settings


class Tick:
    name = "tick"

    def __init__(self, tokens: int, interval: float) -> None:
        self.tokens, self.interval = tokens, interval

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        for _ in range(self.tokens):
            await asyncio.sleep(self.interval)
            yield TextDelta(f"{time.time():.6f} ")
        yield MessageStop("end_turn", Usage(input_tokens=1, output_tokens=self.tokens),
                          request.model)


def main() -> None:
    port, tokens, interval = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    app = create_app(Settings(), providers={"tick": Tick(tokens, interval)})
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio",
                backlog=2048)


if __name__ == "__main__":
    main()
