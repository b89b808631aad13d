"""Engine overhead per turn: ator against LangGraph, both durable on the same PostgreSQL
(bench entry point; imports the harness modules next to it: pgserver, systems).

    ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/engine_overhead.py [--turns 300] [--concurrent-turns 1000]
        [--in-flight 100] [--pool-size 20] [--only ator|langgraph]

Without ATOR_DATABASE_URL it starts ator's embedded PostgreSQL in a temporary dir (and stops
it at the end). Each system gets a fresh database on the server. The model is instant and
scripted, so what is measured is the engine: persistence, scheduling, wake-ups. See
bench/README.md for what each figure means. Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import psutil
from langgraph.types import Durability
from pgserver import STATS_SETTLE_SECONDS, PgServer, ServerDelta
from systems import AtorSystem, ClientCounts, LangGraphSystem, System

WARMUP_TURNS = 20
TURN_TIMEOUT = 60.0  # seconds; a turn that takes longer counts as an error
RESULTS = Path(__file__).parent / "results" / "engine_overhead.json"

# Targets for ator (the lead's acceptance criteria). A one-tool turn with this instant model
# is 2 statements and 2 commits (the post that starts it; its tool step, held while the next
# call ran, with that reply and the turn's end); the slack is the process's heartbeat and
# cached reads landing in the window.
MAX_STATEMENTS = 3
MAX_COMMITS = 3
MIN_P50_RATIO = 2.5  # LangGraph p50 / ator p50
MIN_THROUGHPUT_RATIO = 2.0  # ator concurrent turns/s / LangGraph's


@dataclass
class Phase:
    """One timed run of turns, with its client and server counter deltas."""

    turns: int
    in_flight: int
    wall_s: float
    latencies_ms: list[float]
    errors: list[str]
    client: ClientCounts
    server: ServerDelta
    connections: int  # server backends on the system's database when the phase ended
    cpu_s: float  # CPU of this process (the system under test and the driver) in the phase
    rss_peak_kb: float  # this process's peak RSS in the phase
    rss_before_kb: float

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies_ms) or [float("nan")]
        q = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else lat * 99
        per = 1 / self.turns
        return {
            "turns": self.turns, "in_flight": self.in_flight, "wall_s": round(self.wall_s, 3),
            "throughput_tps": self.turns / self.wall_s,
            "p50_ms": q[49], "p95_ms": q[94], "mean_ms": statistics.fmean(lat),
            "errors": len(self.errors),
            "statements_per_turn": self.client.statements * per,
            "client_commits_per_turn":
                None if self.client.commits is None else self.client.commits * per,
            "server_commits_per_turn": self.server.commits * per,
            "wal_fsyncs_per_turn": self.server.wal_fsyncs * per,
            "other_db_commits": self.server.other_commits,
            "connections": self.connections,
            # Load-robust: CPU time, not wall time (the driver's share is the same loop of
            # `turn()` calls on both sides).
            "cpu_ms_per_turn": self.cpu_s * 1000 * per,
            "rss_per_in_flight_turn_kb":
                max(0.0, self.rss_peak_kb - self.rss_before_kb) / self.in_flight,
        }


async def drive(system: System, threads: Sequence[uuid.UUID], in_flight: int
                ) -> tuple[float, list[float], list[str]]:
    """Run one turn per thread with `in_flight` workers; returns (wall s, latencies ms, errors)."""
    todo = iter(threads)  # shared by the workers: each next() hands out a distinct thread
    latencies: list[float] = []
    errors: list[str] = []

    async def worker() -> None:
        for thread in todo:
            start = time.perf_counter()
            try:
                async with asyncio.timeout(TURN_TIMEOUT):
                    await system.turn(thread)
            except Exception as exc:  # a benchmark counts every failure, whatever its type
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
            else:
                latencies.append((time.perf_counter() - start) * 1000)

    start = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(min(in_flight, len(threads))):
            group.create_task(worker())
    return time.perf_counter() - start, latencies, errors


def _rss_kb() -> float:
    return float(psutil.Process().memory_info().rss) / 1024


@contextlib.asynccontextmanager
async def _rss_peak(every: float = 0.05):  # type: ignore[no-untyped-def]
    """Samples this process's RSS while the block runs; yields a one-item list, the peak."""
    peak = [_rss_kb()]

    async def sample() -> None:
        while True:
            peak[0] = max(peak[0], _rss_kb())
            await asyncio.sleep(every)

    task = asyncio.create_task(sample())
    try:
        yield peak
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        peak[0] = max(peak[0], _rss_kb())


def _delta(after: ClientCounts, before: ClientCounts) -> ClientCounts:
    commits = None
    if after.commits is not None and before.commits is not None:
        commits = after.commits - before.commits
    return ClientCounts(after.statements - before.statements, commits)


async def measure(system: System, server: PgServer, args: argparse.Namespace) -> dict[str, Any]:
    # Warm-up: connections opened, statements prepared, caches filled, for both pool shapes.
    _, _, warm_errors = await drive(system, await system.new_threads(WARMUP_TURNS), 1)
    burst = min(args.in_flight, args.concurrent_turns)
    _, _, burst_errors = await drive(system, await system.new_threads(burst), args.in_flight)
    # Every thread exists before any timing starts, so creating them is never counted.
    plan = [(args.turns, 1, await system.new_threads(args.turns)),
            (args.concurrent_turns, args.in_flight,
             await system.new_threads(args.concurrent_turns))]
    await server.settle(args.settle)
    server_before = await server.counters(system.database)
    phases: list[Phase] = []
    for turns, in_flight, threads in plan:
        client_before = system.client_counts()
        rss_before = _rss_kb()
        cpu_before = time.process_time()
        async with _rss_peak() as peak:
            wall, latencies, errors = await drive(system, threads, in_flight)
        cpu = time.process_time() - cpu_before
        client = _delta(system.client_counts(), client_before)
        connections = await server.connections(system.database)
        await server.settle(args.settle)
        server_after = await server.counters(system.database)
        phases.append(Phase(turns, in_flight, wall, latencies, errors, client,
                            server_after - server_before, connections, cpu, peak[0],
                            rss_before))
        server_before = server_after
    sequential, concurrent = phases
    # Memory of an idle thread: what this process keeps for threads that exist but run
    # nothing (created, one turn each ended: every thread above is idle now).
    rss_idle = _rss_kb()
    idle = await system.new_threads(args.idle_threads)
    rss_idle_after = _rss_kb()
    del idle
    samples = [*warm_errors, *burst_errors, *sequential.errors, *concurrent.errors]
    return {
        "sequential": sequential.summary(), "concurrent": concurrent.summary(),
        "rss_per_idle_thread_kb": max(0.0, rss_idle_after - rss_idle) / args.idle_threads,
        "warmup_errors": len(warm_errors) + len(burst_errors),
        "errors": len(samples), "error_samples": samples[:5],
    }


async def open_system(name: str, server: PgServer, args: argparse.Namespace,
                      data_dir: Path) -> System:
    if name == "ator":
        url = await server.recreate(AtorSystem.database)
        return await AtorSystem.open(url, data_dir / "ator", args.pool_size)
    url = await server.recreate(LangGraphSystem.database)
    return await LangGraphSystem.open(url, args.pool_size, args.langgraph_durability)


async def alternate(systems: dict[str, System], args: argparse.Namespace
                    ) -> dict[str, dict[str, Any]]:
    """The systems' latency and throughput measured in alternating rounds, each round a
    sequential chunk and a concurrent chunk of every system (the order flipped every round):
    a 2-core machine shared with other work drifts by tens of percent within a minute, and
    measuring one system's phases a minute after the other's put that drift into the ratio
    (LangGraph's CPU per turn moved 13.6 -> 8.7 ms between two runs of the same code)."""
    seq_chunk = max(1, args.turns // args.rounds)
    conc_chunk = max(1, args.concurrent_turns // args.rounds)
    plans = {name: [(await s.new_threads(seq_chunk), await s.new_threads(conc_chunk))
                    for _ in range(args.rounds)] for name, s in systems.items()}
    latencies: dict[str, list[float]] = {name: [] for name in systems}
    walls = dict.fromkeys(systems, 0.0)
    cpu = dict.fromkeys(systems, 0.0)
    errors: dict[str, list[str]] = {name: [] for name in systems}
    names = list(systems)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            sequential, concurrent = plans[name][r]
            before = time.process_time()
            _, lat, errs = await drive(systems[name], sequential, 1)
            latencies[name] += lat
            errors[name] += errs
            wall, _, errs = await drive(systems[name], concurrent, args.in_flight)
            cpu[name] += time.process_time() - before
            walls[name] += wall
            errors[name] += errs
    out: dict[str, dict[str, Any]] = {}
    for name in systems:
        lat = sorted(latencies[name]) or [float("nan")]
        turns = args.rounds * (seq_chunk + conc_chunk)
        out[name] = {"rounds": args.rounds, "sequential_turns": len(lat),
                     "p50_ms": statistics.median(lat),
                     "throughput_tps": args.rounds * conc_chunk / walls[name],
                     "cpu_ms_per_turn": cpu[name] * 1000 / turns,
                     "errors": len(errors[name]), "error_samples": errors[name][:5]}
    return out


# Report ---------------------------------------------------------------------------------

_ROWS: list[tuple[str, str, str]] = [
    # (label, phase, key)
    ("sequential p50 (ms)", "sequential", "p50_ms"),
    ("sequential p95 (ms)", "sequential", "p95_ms"),
    ("sequential mean (ms)", "sequential", "mean_ms"),
    ("sequential throughput (turns/s)", "sequential", "throughput_tps"),
    ("concurrent throughput (turns/s)", "concurrent", "throughput_tps"),
    ("concurrent p50 / p95 (ms)", "concurrent", "p50_ms/p95_ms"),
    ("CPU ms/turn, this process (sequential)", "sequential", "cpu_ms_per_turn"),
    ("CPU ms/turn, this process (concurrent)", "concurrent", "cpu_ms_per_turn"),
    ("RSS KiB per in-flight turn (concurrent)", "concurrent", "rss_per_in_flight_turn_kb"),
    ("RSS KiB per idle thread", "", "rss_per_idle_thread_kb"),
    ("SQL statements/turn (client)", "sequential", "statements_per_turn"),
    ("commits/turn (client)", "sequential", "client_commits_per_turn"),
    ("commits/turn (server, sequential)", "sequential", "server_commits_per_turn"),
    ("commits/turn (server, concurrent)", "concurrent", "server_commits_per_turn"),
    ("WAL fsyncs/turn (sequential)", "sequential", "wal_fsyncs_per_turn"),
    ("WAL fsyncs/turn (concurrent)", "concurrent", "wal_fsyncs_per_turn"),
    ("server connections after concurrent", "concurrent", "connections"),
    ("other DBs' commits in windows", "both", "other_db_commits"),
    ("alternating rounds: sequential p50 (ms)", "alternating", "p50_ms"),
    ("alternating rounds: concurrent turns/s", "alternating", "throughput_tps"),
    ("alternating rounds: CPU ms/turn", "alternating", "cpu_ms_per_turn"),
    ("errors (incl. warm-up)", "", "errors"),
]


def _cell(result: dict[str, Any] | None, phase: str, key: str) -> str:
    if result is None:
        return "-"
    if phase == "":
        value = result[key]
        return f"{value:.2f}" if isinstance(value, float) else str(value)
    if phase == "both":
        return str(result["sequential"][key] + result["concurrent"][key])
    if phase not in result:
        return "-"
    values = [result[phase][k] for k in key.split("/")]
    if any(v is None for v in values):
        return "n/a"
    return " / ".join(str(v) if isinstance(v, int) else f"{v:.1f}" if v >= 100 else f"{v:.2f}"
                      for v in values)


def evaluate(results: dict[str, dict[str, Any]]) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Ratios and PASS/FAIL/SKIP checks against the targets."""
    ator, lg = results.get("ator"), results.get("langgraph")
    ratios: dict[str, float] = {}
    if ator and lg:
        # The headline ratios come from the alternating rounds when they ran (see
        # `alternate`); the phases measured one system after the other are kept beside them.
        ratios["phased_langgraph_p50_over_ator_p50"] = (
            lg["sequential"]["p50_ms"] / ator["sequential"]["p50_ms"])
        ratios["phased_ator_tps_over_langgraph_tps"] = (
            ator["concurrent"]["throughput_tps"] / lg["concurrent"]["throughput_tps"])
        a, b = ator.get("alternating"), lg.get("alternating")
        ratios["langgraph_p50_over_ator_p50"] = (
            b["p50_ms"] / a["p50_ms"] if a and b
            else ratios["phased_langgraph_p50_over_ator_p50"])
        ratios["ator_tps_over_langgraph_tps"] = (
            a["throughput_tps"] / b["throughput_tps"] if a and b
            else ratios["phased_ator_tps_over_langgraph_tps"])
        ratios["langgraph_cpu_over_ator_cpu_sequential"] = (
            lg["sequential"]["cpu_ms_per_turn"] / ator["sequential"]["cpu_ms_per_turn"])
        ratios["langgraph_cpu_over_ator_cpu_concurrent"] = (
            lg["concurrent"]["cpu_ms_per_turn"] / ator["concurrent"]["cpu_ms_per_turn"])

    def check(name: str, value: float | None, ok: bool | None) -> dict[str, Any]:
        status = "SKIP" if ok is None else "PASS" if ok else "FAIL"
        return {"check": name, "value": value, "status": status}

    seq = ator["sequential"] if ator else None
    statements = seq["statements_per_turn"] if seq else None
    commits = seq["client_commits_per_turn"] if seq else None
    p50 = ratios.get("langgraph_p50_over_ator_p50")
    tps = ratios.get("ator_tps_over_langgraph_tps")
    errors = sum(r["errors"] + r.get("alternating", {}).get("errors", 0)
                 for r in results.values())
    checks = [
        check(f"ator SQL statements/turn <= {MAX_STATEMENTS}", statements,
              None if statements is None else statements <= MAX_STATEMENTS),
        check(f"ator commits/turn <= {MAX_COMMITS}", commits,
              None if commits is None else commits <= MAX_COMMITS),
        check(f"LangGraph sequential p50 / ator's >= {MIN_P50_RATIO:g}", p50,
              None if p50 is None else p50 >= MIN_P50_RATIO),
        check(f"ator concurrent throughput >= {MIN_THROUGHPUT_RATIO:g} x LangGraph's", tps,
              None if tps is None else tps >= MIN_THROUGHPUT_RATIO),
        check("zero errors", errors, errors == 0),
    ]
    return ratios, checks


def render(config: dict[str, Any], results: dict[str, dict[str, Any]],
           ratios: dict[str, float], checks: list[dict[str, Any]]) -> str:
    ator, lg = results.get("ator"), results.get("langgraph")
    lines = [
        "Engine overhead per turn — instant scripted model: 1 calculator call, then the answer.",
        "A new thread per turn; every thread is created before timing starts and is not counted.",
        f"server: {config['server']}",
        f"turns: {config['turns']} sequential (after {WARMUP_TURNS} warm-up), "
        f"{config['concurrent_turns']} concurrent with {config['in_flight']} in flight",
        f"pool size {config['pool_size']}: ator Settings.db_pool_size; LangGraph "
        f"AsyncConnectionPool min_size = max_size",
        f"LangGraph: create_react_agent + AsyncPostgresSaver, "
        f"durability={config['langgraph_durability']!r}",
        f"event loop: {config['event_loop']}, both systems in this one process "
        f"(--loop asyncio for the standard one)",
        "",
        f"{'metric':<42}{'ator':>16}{'LangGraph':>16}",
    ]
    for label, phase, key in _ROWS:
        lines.append(f"{label:<42}{_cell(ator, phase, key):>16}{_cell(lg, phase, key):>16}")
    lines.append("")
    if ratios:
        lines.append(f"LangGraph p50 / ator p50 = {ratios['langgraph_p50_over_ator_p50']:.2f}   "
                     f"ator / LangGraph concurrent throughput = "
                     f"{ratios['ator_tps_over_langgraph_tps']:.2f}"
                     + ("  (alternating rounds)" if "alternating" in ator else ""))
        lines.append("phased (one system after the other): p50 ratio "
                     f"{ratios['phased_langgraph_p50_over_ator_p50']:.2f}, throughput ratio "
                     f"{ratios['phased_ator_tps_over_langgraph_tps']:.2f}")
        lines.append("LangGraph CPU/turn / ator CPU/turn = "
                     f"{ratios['langgraph_cpu_over_ator_cpu_sequential']:.2f} sequential, "
                     f"{ratios['langgraph_cpu_over_ator_cpu_concurrent']:.2f} concurrent")
        lines.append(f"load average: {config['load_before']} before, {config['load_after']} "
                     f"after ({os.cpu_count()} CPUs)")
    for c in checks:
        value = "-" if c["value"] is None else f"{c['value']:.2f}"
        lines.append(f"  {c['status']:<5}{c['check']}  ({value})")
    for name, result in results.items():
        for sample in [*result["error_samples"],
                       *result.get("alternating", {}).get("error_samples", [])]:
            lines.append(f"  error ({name}): {sample}")
        own = sum(result[p]["server_commits_per_turn"] * result[p]["turns"]
                  for p in ("sequential", "concurrent"))
        other = result["sequential"]["other_db_commits"] + result["concurrent"]["other_db_commits"]
        if other > 0.05 * own:  # the WAL fsync counter is server-wide
            lines.append(f"  WARNING ({name}): {other} commits on other databases during its "
                         "windows; its WAL fsyncs/turn include their work")
    lines += [
        "",
        "statements: ator = ator.db.stats; LangGraph = psycopg cursor execute calls + "
        "executemany parameter sets.",
        "commits (client) = ator.db.stats; commits (server) = pg_stat_database.xact_commit of "
        "each system's database (autocommit reads count too).",
        "WAL fsyncs: server-wide WAL fsync counter; counters read after "
        f"{config['settle_s']:g}s idle so lazily flushed stats are in.",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=300, help="sequential turns (default 300)")
    parser.add_argument("--concurrent-turns", type=int, default=1000)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--idle-threads", type=int, default=2000,
                        help="threads created after the timed phases to size an idle one")
    parser.add_argument("--pool-size", type=int, default=20,
                        help="ator db_pool_size; LangGraph's pool gets the same bounds")
    parser.add_argument("--only", choices=["ator", "langgraph"])
    parser.add_argument("--rounds", type=int, default=10,
                        help="alternating rounds after the phases (0: none); each runs "
                             "turns/rounds sequential and concurrent-turns/rounds concurrent "
                             "turns of every system, and the ratios are taken from them")
    parser.add_argument("--langgraph-durability", choices=get_args(Durability), default="async",
                        help="'async' (default, LangGraph's own) writes a step's checkpoint "
                             "while the next step runs, as ator holds a tool step while the "
                             "next model call runs; 'sync' commits every step first")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop",
                        help="the event loop both systems run on: uvloop (default; what "
                             "`ator serve` and `ator worker` run on) or the standard one")
    parser.add_argument("--settle", type=float, default=STATS_SETTLE_SECONDS,
                        help="idle seconds before reading server counters (see pgserver.py)")
    args = parser.parse_args(argv)
    if min(args.turns, args.concurrent_turns, args.in_flight, args.pool_size) < 1:
        parser.error("counts must be positive")
    return args


async def main(args: argparse.Namespace) -> int:
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    server = await PgServer.start()
    results: dict[str, dict[str, Any]] = {}
    systems: dict[str, System] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="ator-bench-") as tmp:
            try:
                for name in ["ator", "langgraph"]:
                    if args.only in (None, name):
                        systems[name] = await open_system(name, server, args, Path(tmp))
                for name, system in systems.items():
                    print(f"running {system.name} …", file=sys.stderr, flush=True)
                    results[name] = await measure(system, server, args)
                if args.rounds:
                    print("running both in alternating rounds …", file=sys.stderr, flush=True)
                    for name, figures in (await alternate(systems, args)).items():
                        results[name]["alternating"] = figures
            finally:
                for system in systems.values():
                    await system.close()
        config = {
            "server": server.description, "server_version_num": server.version,
            "turns": args.turns, "concurrent_turns": args.concurrent_turns,
            "in_flight": args.in_flight, "pool_size": args.pool_size,
            "langgraph_durability": args.langgraph_durability, "settle_s": args.settle,
            "event_loop": args.loop,
            "warmup_turns": WARMUP_TURNS, "turn_timeout_s": TURN_TIMEOUT,
            "load_before": load_before,
            "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        }
        ratios, checks = evaluate(results)
        print(render(config, results, ratios, checks))
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(
            {"config": config, "results": results, "ratios": ratios, "checks": checks,
             "passed": all(c["status"] != "FAIL" for c in checks),
             "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, indent=2))
        print(f"\nresults: {RESULTS}")
        return 0 if all(c["status"] != "FAIL" for c in checks) else 1
    finally:
        for system in (AtorSystem, LangGraphSystem):
            await server.drop(system.database)
        await server.close()


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.loop == "uvloop":
        import uvloop

        sys.exit(uvloop.run(main(arguments)))
    sys.exit(asyncio.run(main(arguments)))
