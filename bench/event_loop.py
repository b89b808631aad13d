"""ator's turn on the standard event loop against uvloop, in alternating rounds.

`ator serve` runs on uvloop (uvicorn takes it when installed) and so does `ator worker`
(cli/loop.py). This prints what that choice is worth on `make bench`'s turn (the scripted
model, one calculator call, then the answer; a new thread per turn, fully durable): each
round is a fresh process that opens an engine on one loop, runs warm-up turns, then `--turns`
sequential turns, and the next round does the same on the other loop (the order flips every
round), so the machine's drift over minutes falls on both alike. It reports each round's p50
latency and CPU per turn, their medians, and the ratios.

    ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \
        .venv/bin/python bench/event_loop.py [--rounds 8] [--turns 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import uvloop
from pgserver import PgServer
from systems import AtorSystem

WARMUP = 30
LOOPS = ("asyncio", "uvloop")

Runner = Callable[[Coroutine[Any, Any, tuple[float, float]]], tuple[float, float]]


async def _round(url: str, turns: int) -> tuple[float, float]:
    """(p50 ms, CPU ms per turn) of `turns` sequential turns on a fresh engine."""
    with tempfile.TemporaryDirectory(prefix="ator-bench-") as tmp:
        system = await AtorSystem.open(url, Path(tmp), 20)
        try:
            threads = await system.new_threads(turns + WARMUP)
            for thread in threads[:WARMUP]:
                await system.turn(thread)
            latencies = []
            cpu = time.process_time()
            for thread in threads[WARMUP:]:
                started = time.perf_counter()
                await system.turn(thread)
                latencies.append(time.perf_counter() - started)
            return statistics.median(latencies) * 1e3, (time.process_time() - cpu) / turns * 1e3
        finally:
            await system.close()


def _one(name: str, url: str, turns: int) -> int:
    """One round in this process (the parent runs each round in a fresh process)."""
    run: Runner = uvloop.run if name == "uvloop" else asyncio.run
    print(json.dumps(run(_round(url, turns))))
    return 0


async def _rounds(args: argparse.Namespace) -> tuple[str, dict[str, list[list[float]]]]:
    server = await PgServer.start()
    figures: dict[str, list[list[float]]] = {name: [] for name in LOOPS}
    try:
        for i in range(args.rounds):
            for name in (LOOPS if i % 2 == 0 else LOOPS[::-1]):
                url = await server.recreate(AtorSystem.database)
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, __file__, "--one", name, "--url", url,
                    "--turns", str(args.turns), stdout=asyncio.subprocess.PIPE)
                out, _ = await proc.communicate()
                if proc.returncode != 0:
                    raise SystemExit(f"round {i + 1} on {name} failed ({proc.returncode})")
                figures[name].append(json.loads(out.decode().strip().splitlines()[-1]))
                p50, cpu = figures[name][-1]
                print(f"round {i + 1} {name}: p50 {p50:.2f} ms, CPU {cpu:.2f} ms/turn",
                      file=sys.stderr, flush=True)
        return server.description, figures
    finally:
        await server.drop(AtorSystem.database)
        await server.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=8, help="rounds per loop (default 8)")
    parser.add_argument("--turns", type=int, default=300, help="timed turns per round")
    parser.add_argument("--one", choices=LOOPS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.rounds, args.turns) < 1:
        parser.error("counts must be positive")
    if args.one:
        return _one(args.one, args.url, args.turns)
    description, figures = asyncio.run(_rounds(args))
    p50 = {name: statistics.median(f[0] for f in rows) for name, rows in figures.items()}
    cpu = {name: statistics.median(f[1] for f in rows) for name, rows in figures.items()}
    print(f"ator's turn: {args.rounds} alternating rounds of {args.turns} sequential turns "
          f"per loop, each round a fresh process ({description})")
    print(f"{'loop':<10}{'median p50 (ms)':>18}{'median CPU ms/turn':>22}")
    for name in LOOPS:
        print(f"{name:<10}{p50[name]:>18.2f}{cpu[name]:>22.2f}")
    print(f"asyncio / uvloop: p50 {p50['asyncio'] / p50['uvloop']:.2f}, "
          f"CPU {cpu['asyncio'] / cpu['uvloop']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
