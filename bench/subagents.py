"""Subagent results: how long from a child's last step until its parent sees the result, and
how many SQL statements a notification costs (bench entry point; imports pgserver).

    ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/subagents.py [--children 200]

Each round: a parent's turn spawns one child and ends; the child (an instant scripted model,
after a short pause so the parent is idle by then) answers. Latency is measured from the end
of the child's last model call (its final write follows) to the parent's model receiving a
request that carries the result: the child's final write with the claim and the push, the
wake, the parent's turn start draining its mailbox, the history rebuild. Statements are
ator's own (`db.stats`) in that window: the child's final write and the parent's turn start.
A round that takes longer than 30 s counts as an error. Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pgserver import PgServer

from ator import Ator, Scope, Settings
from ator.providers.base import (
    MessageStop,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ToolUseStart,
    ToolUseStop,
    Usage,
)

MAX_P95_MS = 250.0
MAX_STATEMENTS = 2.0  # the child's final write + the parent's turn start; no extra one


class Rounds:
    """Parent and child in one provider; records the two instants of each round."""

    name = "bench"

    def __init__(self) -> None:
        self.stats: Any = None  # the database's counters, once it is open
        self.child_done: dict[str, tuple[float, int]] = {}
        self.parent_saw: dict[str, tuple[float, int]] = {}
        self.seen = asyncio.Event()
        self.round = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        texts = [b["text"] for m in request.messages for b in m["content"]
                 if b.get("type") == "text"]
        if texts and texts[0].startswith("You are a subagent"):
            await asyncio.sleep(0.05)  # the parent's turn has ended by now: it is idle
            tag = texts[0].split("## Task\n", 1)[1].split("\n", 1)[0]
            yield TextDelta(f"result of {tag}")
            self.child_done[tag] = (time.perf_counter(), self.stats.statements)
        elif "<subagent_result" in texts[-1]:
            tag = texts[-1].split("result of ", 1)[1].split("\n", 1)[0]
            self.parent_saw[tag] = (time.perf_counter(), self.stats.statements)
            self.seen.set()
            yield TextDelta("noted")
        elif any(b.get("type") == "tool_result" for b in request.messages[-1]["content"]):
            yield TextDelta("waiting")
        else:
            yield ToolUseStart("toolu_" + texts[-1], "agent_spawn")
            yield ToolUseStop("toolu_" + texts[-1], {"title": "t", "task": texts[-1]})
            yield MessageStop("tool_use", Usage(10, 5), request.model)
            return
        yield MessageStop("end_turn", Usage(10, 5), request.model)


async def run(children: int) -> int:
    server = await PgServer.start()
    url = await server.recreate("bench_subagents")
    try:
        settings = Settings(database_url=url, data_dir=Path(tempfile.mkdtemp()),
                            # No heartbeat or reaper sweep inside the measured windows:
                            # they share the statement counter.
                            reaper_interval=3600.0, lease_ttl=600.0)
        rounds = Rounds()
        ator = await Ator.open(settings, providers={"bench": rounds})
        rounds.stats = ator.db.stats
        try:
            return await _measure(ator, rounds, children)
        finally:
            await ator.close()
    finally:
        await server.drop("bench_subagents")
        await server.close()


async def _measure(ator: Ator, rounds: Rounds, children: int) -> int:
    org = await ator.create_org("bench")
    scope = Scope(org.id)
    setup = await ator.create_setup(scope, name="bench", provider="bench", model="m")
    latencies: list[float] = []
    statements: list[int] = []
    errors = 0
    for i in range(children + 5):
        thread = await ator.create_thread(scope, setup.id)
        tag = f"round{i:05d}"
        rounds.seen.clear()
        await ator.submit(scope, thread.id, tag)
        try:
            async with asyncio.timeout(30):
                while tag not in rounds.parent_saw:
                    await rounds.seen.wait()
                    rounds.seen.clear()
        except TimeoutError:
            errors += 1
            continue
        if i < 5:
            continue  # warm-up
        (t0, s0), (t1, s1) = rounds.child_done[tag], rounds.parent_saw[tag]
        latencies.append((t1 - t0) * 1000)
        statements.append(s1 - s0)
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    p50, p95 = statistics.median(latencies), q[94]
    per = statistics.median(statements)
    print(f"children                                  {len(latencies)}")
    print(f"child's last step -> parent sees it  p50  {p50:.1f} ms")
    print(f"                                     p95  {p95:.1f} ms")
    print(f"                                     max  {max(latencies):.1f} ms")
    print(f"statements per notification (median)      {per:g}  (mean "
          f"{statistics.mean(statements):.2f}, min {min(statements)}, max {max(statements)})")
    print(f"errors                                    {errors}")
    ok = p95 <= MAX_P95_MS and per <= MAX_STATEMENTS and errors == 0
    print(f"\n  {'PASS' if p95 <= MAX_P95_MS else 'FAIL'} p95 <= {MAX_P95_MS:g} ms")
    print(f"  {'PASS' if per <= MAX_STATEMENTS else 'FAIL'} statements per notification <= "
          f"{MAX_STATEMENTS:g} (the child's final write + the parent's turn start)")
    print(f"  {'PASS' if errors == 0 else 'FAIL'} zero errors")
    return 0 if ok else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--children", type=int, default=200)
    args = parser.parse_args()
    sys.exit(asyncio.run(run(args.children)))


if __name__ == "__main__":
    main()
