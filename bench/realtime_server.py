"""One replica for bench/realtime_latency.py: `ator serve` with a `tick` provider whose
tokens carry the wall-clock time they were produced (bench helper; imports ator, uvicorn,
engineio).

    python bench/realtime_server.py PORT TOKENS INTERVAL   (ATOR_* settings from the env)

Each model call streams TOKENS text deltas "<unix time> ", one every INTERVAL seconds, then
stops; the engine coalesces and publishes them as usual (engine/publish.py).

With BENCH_STATS=<path>, the replica keeps figures that do not depend on the machine's load
and writes them to <path> (JSON) on SIGUSR1: its CPU seconds, how many JSON encodes it made
(ator.jsonenc), how many WebSocket messages it sent, and the event loop's lag (how late a
5 ms timer fired: p50, p99, max) since the previous SIGUSR1. With BENCH_PROFILE=<path> as
well, it runs cProfile from one SIGUSR1 to the next (the bench's streaming) and writes the
stats there.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import engineio.async_drivers.asgi  # type: ignore[import-untyped]
import uvicorn

from ator import jsonenc
from ator.api.app import create_app
from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage
from ator.settings import Settings

_LAG_TICK = 0.005
PROFILE: Any = None  # a cProfile.Profile under BENCH_PROFILE


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


class Stats:
    """Counters wrapped around the functions that do the work, and a loop-lag probe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.counts = {"json_encodes": 0, "ws_sends": 0}
        self.lags: list[float] = []
        self.profiling = False
        self._wrap(jsonenc, "dumps", "json_encodes")
        self._wrap(jsonenc, "encode", "json_encodes")
        self._wrap(engineio.async_drivers.asgi.WebSocket, "send", "ws_sends")
        self.gc_pauses: list[list[float]] = [[], [], []]  # ms, by generation
        self._gc_start = 0.0
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gc_pauses[info["generation"]].append((time.perf_counter() - self._gc_start)
                                                      * 1000)

    def _wrap(self, owner: Any, name: str, counter: str) -> None:
        fn: Callable[..., Any] = getattr(owner, name)
        counts = self.counts
        if asyncio.iscoroutinefunction(fn):
            async def counted_async(*args: Any, **kwargs: Any) -> Any:
                counts[counter] += 1
                return await fn(*args, **kwargs)
            setattr(owner, name, counted_async)
        else:
            def counted(*args: Any, **kwargs: Any) -> Any:
                counts[counter] += 1
                return fn(*args, **kwargs)
            setattr(owner, name, counted)

    async def probe(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, self.dump)
        while True:
            start = loop.time()
            await asyncio.sleep(_LAG_TICK)
            self.lags.append((loop.time() - start - _LAG_TICK) * 1000)

    def dump(self) -> None:
        lags, self.lags = sorted(self.lags), []
        def pct(p: float) -> float:
            return round(lags[min(len(lags) - 1, int(p / 100 * len(lags)))], 2) if lags else 0.0
        times = os.times()
        figures = {**self.counts, "cpu_s": times.user + times.system,
                   "loop_lag_ms": {"p50": pct(50), "p99": pct(99), "max": pct(100),
                                   "samples": len(lags)},
                   "gc_pauses_ms": [{"count": len(p), "max": round(max(p, default=0.0), 2),
                                     "total": round(sum(p), 1)} for p in self.gc_pauses]}
        self.gc_pauses = [[], [], []]
        if PROFILE is not None:  # on from one SIGUSR1 to the next: the streaming only
            self.profiling = not self.profiling
            if self.profiling:
                PROFILE.enable()
            else:
                PROFILE.disable()
                PROFILE.dump_stats(os.environ["BENCH_PROFILE"])
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(figures))
        tmp.replace(self.path)


def main() -> None:
    port, tokens, interval = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    stats = Stats(Path(os.environ["BENCH_STATS"])) if os.environ.get("BENCH_STATS") else None
    app = create_app(Settings(), providers={"tick": Tick(tokens, interval)})
    if stats is not None:
        inner = app

        async def with_probe(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "lifespan":
                task = asyncio.get_running_loop().create_task(stats.probe())
                try:
                    await inner(scope, receive, send)
                finally:
                    task.cancel()
                return
            await inner(scope, receive, send)
        served: Any = with_probe
    else:
        served = app
    config = uvicorn.Config(served, host="127.0.0.1", port=port, log_level="warning",
                            ws="websockets-sansio", backlog=2048)
    uvicorn.Server(config).run()


if __name__ == "__main__":
    if os.environ.get("BENCH_PROFILE"):
        import cProfile

        PROFILE = cProfile.Profile()
    main()
