"""A 1,000-item `map` of trivial transforms: ator's workflows beside DBOS (bench).

```sh
ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/workflows.py
```

Same server, same run, each system on a fresh database of its own (`bench_wf_ator`,
`bench_wf_dbos`):

- ator: one process running the jobs worker (`--concurrency` handlers), a published recipe
  `map` over `[1..N]` of `item * 2`; timed from the start call until the run succeeded.
  Statements and commits are the client's (`Database.stats`), commits also the server's
  (`pg_stat_database.xact_commit`), per item step; CPU is the process's own
  (`time.process_time`, all its threads) and its server backends' (`/proc/<pid>/stat` of
  the database's backends) over the same window. `--breakdown` prints statements per step
  by statement.
- DBOS 3.4: a parent workflow enqueueing N child workflows (one `@DBOS.step` each,
  `x * 2`) on a queue of the same concurrency, in a child process; timed from the parent's
  start until its result. Commits and backend CPU are the server's, per child; CPU the
  child process's own.
- SIGKILL (`--kill`): each system's fan-out on two worker processes, one SIGKILLed when a
  third of the items are done. "Ran twice" counts the items whose step body *ran to its
  end* on two attempts: each body writes a line when it ends (ator: the step runner's
  `step body ended` debug line, DBOS: the step function appends to a file), and the lines
  are counted per item after the run. An item claimed but not started, or killed mid-body,
  does not count. ator also reports items claimed twice (attempt rows) and stored twice
  (always 0: a stored output is never replaced). ator's survivor takes over the killed
  worker's steps after their lease (2 s here); DBOS recovers a dead executor's workflows
  when it starts again with the same executor id, so the killed worker is restarted.

Prints steps/s and the ratio; results also go to bench/results/workflows.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from pgserver import STATS_SETTLE_SECONDS, PgServer  # noqa: E402

RECIPE = {"schema": "ator.workflow/v1", "budget": {"max_steps": 10_000},
          "steps": [{"id": "each", "type": "map", "over": "[1..$n]", "concurrency": 50,
                     "step": {"type": "transform", "expr": "item * 2"}}]}


def recipe(n: int, concurrency: int) -> dict[str, Any]:
    steps = [{**RECIPE["steps"][0], "over": f"[1..{n}]", "concurrency": concurrency}]
    return {**RECIPE, "steps": steps}


def cpu_of(pids: list[int]) -> dict[int, float]:
    """utime + stime of each live process, in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone, or not on this machine
        out[pid] = (int(fields[11]) + int(fields[12])) / tick
    return out


class Backends:
    """CPU of one database's server backends over a window (backends that exit within it
    are lost: a floor; ones that appear count in full)."""

    def __init__(self, server: PgServer, database: str) -> None:
        self.server, self.database = server, database
        self.before: dict[int, float] = {}

    async def _pids(self) -> list[int]:
        monitor = self.server._require_monitor()
        cur = await monitor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.database,))
        return [int(r[0]) for r in await cur.fetchall()]

    async def start(self) -> None:
        self.before = cpu_of(await self._pids())

    async def seconds(self) -> float:
        after = cpu_of(await self._pids())
        return sum(v - self.before.get(pid, 0.0) for pid, v in after.items())


class Tally:
    """Statements by text (for --breakdown), counted where ator compiles them."""

    def __init__(self) -> None:
        from collections import Counter

        from ator.store import database

        self.counts: Counter[str] = Counter()
        compiled = database.Database._compiled

        def counting(db: Any, stmt: Any) -> tuple[str, tuple[str, ...]]:
            found = compiled(db, stmt)
            self.counts[" ".join(found[0].split())[:100]] += 1
            return found

        database.Database._compiled = counting  # type: ignore[method-assign]


async def ator_run(url: str, n: int, concurrency: int, backends: Backends,
                   tally: Tally | None) -> dict[str, Any]:
    from ator.engine.runtime import Ator
    from ator.settings import Settings
    from ator.store.scope import Scope
    from ator.workflows import Workflows

    settings = Settings(database_url=url, job_concurrency=concurrency, job_poll_interval=0.2,
                        owner_id=f"bench-{uuid.uuid4().hex[:6]}", db_pool_size=20)
    async with await Ator.open(settings) as ator:
        await ator.start_jobs()
        scope = Scope((await ator.create_org(f"bench-{uuid.uuid4().hex[:6]}")).id)
        flows = ator.service(Workflows)
        wf = await flows.create(scope, "fanout")
        await flows.publish(scope, wf["id"], recipe(n, concurrency))
        await backends.start()
        if tally is not None:
            tally.counts.clear()
        before = ator.db.stats.snapshot()
        cpu = time.process_time()
        started = time.perf_counter()
        run, _ = await flows.start(scope, wf["id"], {})
        seq, ended = 0, False
        while not ended:  # the run's own event log, long-polled (no sleeps)
            frames = await ator.wait_run_events(scope, run["id"], after_seq=seq, timeout=5)
            seq = frames[-1]["seq"] if frames else seq
            ended = any(f["type"] in ("run_succeeded", "run_failed") for f in frames)
        found = await flows.run(scope, run["id"])
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu
        server_cpu = await backends.seconds()
        statements, commits = (a - b for a, b in zip(ator.db.stats.snapshot(), before,
                                                     strict=True))
    assert found["status"] == "succeeded", found
    out = {"seconds": elapsed, "steps": n, "statements": statements, "commits": commits,
           "cpu_s": cpu, "server_cpu_s": server_cpu}
    if tally is not None:
        out["breakdown"] = {k: v / n for k, v in tally.counts.most_common(20)}
    return out


DBOS_CHILD = r'''
import sys, time
from dbos import DBOS
url, n, conc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
DBOS(config={"name": "bench", "system_database_url": url, "log_level": "WARNING",
             "sys_db_pool_size": 20})

@DBOS.step()
def double(x):
    return x * 2

@DBOS.workflow()
def child(x):
    return double(x)

@DBOS.workflow()
def parent(n):
    handles = [queue.enqueue(child, i) for i in range(1, n + 1)]
    return sum(h.get_result() for h in handles)

DBOS.launch()
# Polled every 0.1 s (DBOS's default is 1 s, which alone would cap it at `conc` per second).
queue = DBOS.register_queue("fanout", worker_concurrency=conc, polling_interval_sec=0.1)
t, cpu = time.perf_counter(), time.process_time()
total = DBOS.start_workflow(parent, n).get_result()
print("RESULT", time.perf_counter() - t, total, time.process_time() - cpu, flush=True)
DBOS.destroy()
'''


async def dbos_run(url: str, n: int, concurrency: int, backends: Backends,
                   python: str) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        python, "-c", DBOS_CHILD, url, str(n), str(concurrency),
        stdout=asyncio.subprocess.PIPE)
    # DBOS connects its pools at launch; the window's backends are read from the first
    # one that shows (a floor: the CPU they spent before that is lost).
    while not await backends._pids():  # noqa: ASYNC110 (another process's server state)
        await asyncio.sleep(0.05)
    await backends.start()
    assert proc.stdout is not None
    while not (line := (await proc.stdout.readline()).decode()).startswith("RESULT"):
        assert line, "the DBOS run ended without a result"
    server_cpu = await backends.seconds()  # before it exits: its backends go with it
    await proc.communicate()
    _, seconds, total, cpu = line.split()
    assert int(total) == n * (n + 1), total
    return {"seconds": float(seconds), "steps": n, "cpu_s": float(cpu),
            "server_cpu_s": server_cpu}


# A worker that logs every step body's end (bench only: the step runner's debug line).
ATOR_WORKER = ("import logging; logging.getLogger('ator.workflows.steps').setLevel('DEBUG');"
               "from ator.cli.main import main; main()")


def body_ends(logs: list[Path]) -> dict[str, int]:
    """Per step, how many attempts' bodies ran to their end (from the workers' logs)."""
    seen: dict[str, set[int]] = {}
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            if "step body ended" not in line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut by the kill
            seen.setdefault(rec["step_id"], set()).add(int(rec["attempt"]))
    return {step: len(attempts) for step, attempts in seen.items()}


async def ator_kill(url: str, n: int, concurrency: int, tmp: Path) -> dict[str, Any]:
    from ator.engine.runtime import Ator
    from ator.settings import Settings
    from ator.store.scope import Scope
    from ator.workflows import Workflows

    env = {**os.environ, "ATOR_DATABASE_URL": url, "ATOR_JOB_LEASE_TTL": "2",
           "ATOR_WORKFLOW_LEASE_TTL": "2", "ATOR_JOB_POLL_INTERVAL": "0.1",
           "ATOR_JOB_CONCURRENCY": str(concurrency)}
    procs = []
    for name in ("doomed", "survivor"):
        log = (tmp / f"{name}.log").open("wb")
        procs.append(await asyncio.create_subprocess_exec(
            sys.executable, "-c", ATOR_WORKER, "worker", stderr=log,
            env={**env, "ATOR_DATA_DIR": str(tmp / name), "ATOR_OWNER_ID": name,
                 "ATOR_LOG_JSON": "true"}))
    settings = Settings(database_url=url, owner_id="bench-parent")
    try:
        async with await Ator.open(settings, engine=False) as ator:
            scope = Scope((await ator.create_org(f"kill-{uuid.uuid4().hex[:6]}")).id)
            flows = ator.service(Workflows)
            wf = await flows.create(scope, "fanout")
            await flows.publish(scope, wf["id"], recipe(n, concurrency))
            run, _ = await flows.start(scope, wf["id"], {})
            killed = False
            while (found := await flows.run(scope, run["id"]))["status"] == "running":
                done = await ator.db.pool.fetchval(
                    "SELECT count(*) FROM workflow_steps WHERE run_id = $1 AND status = 'done'"
                    " AND parent_id IS NOT NULL", run["id"])
                if not killed and done >= n // 3:
                    procs[0].send_signal(signal.SIGKILL)
                    killed = True
                await asyncio.sleep(0.05)
            rows = await ator.db.pool.fetch(
                "SELECT s.id, count(a.*) AS ran, count(a.*) FILTER (WHERE a.outcome = 'done')"
                " AS stored FROM workflow_steps s JOIN workflow_attempts a ON a.step_id = s.id"
                " WHERE s.run_id = $1 GROUP BY s.id", run["id"])
    finally:
        for p in procs:
            if p.returncode is None:
                p.send_signal(signal.SIGTERM)
            await p.wait()
    assert found["status"] == "succeeded", found
    ends = body_ends([tmp / "doomed.log", tmp / "survivor.log"])
    assert len(ends) >= n, f"only {len(ends)} of {n} items logged their body's end"
    return {"ran_twice": sum(1 for v in ends.values() if v > 1),
            "claimed_twice": sum(1 for r in rows if r["ran"] > 1),
            "stored_twice": sum(1 for r in rows if r["stored"] > 1)}


DBOS_WORKER = r'''
import os, sys, threading
from dbos import DBOS
url, conc, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
DBOS(config={"name": "bench", "system_database_url": url, "log_level": "WARNING",
             "sys_db_pool_size": 20, "application_version": "bench",
             "executor_id": os.environ["DBOS__VMID"]})

@DBOS.step()
def double(x):
    y = x * 2
    os.write(fd, f"{x}\n".encode())  # the body ran to its end
    return y

@DBOS.workflow()
def child(x):
    return double(x)

DBOS.launch()
DBOS.register_queue("fanout", global_concurrency=conc, polling_interval_sec=0.1)
print("READY", flush=True)
threading.Event().wait()
'''


async def dbos_kill(url: str, n: int, concurrency: int, tmp: Path,
                    python: str) -> dict[str, Any]:
    import psycopg
    from dbos import DBOSClient

    async def worker(name: str) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            python, "-c", DBOS_WORKER, url, str(concurrency), str(tmp / f"{name}.ends"),
            stdout=asyncio.subprocess.PIPE, env={**os.environ, "DBOS__VMID": name})
        assert proc.stdout is not None
        while not (line := await proc.stdout.readline()).startswith(b"READY"):
            assert line, f"the DBOS worker {name} did not start"
        return proc

    doomed, survivor = await worker("doomed"), await worker("survivor")
    procs = [doomed, survivor]
    try:
        client = DBOSClient(system_database_url=url)
        await asyncio.to_thread(lambda: [client.enqueue(
            {"workflow_name": "child", "queue_name": "fanout"}, i) for i in range(1, n + 1)])
        client.destroy()
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            async def done() -> int:
                cur = await conn.execute("SELECT count(*) FROM dbos.workflow_status"
                                         " WHERE name = 'child' AND status = 'SUCCESS'")
                row = await cur.fetchone()
                return int(row[0]) if row else 0
            # Polled: the progress is another process's rows (no event to wait on).
            while await done() < n // 3:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            doomed.send_signal(signal.SIGKILL)
            await doomed.wait()
            procs.append(await worker("doomed"))  # recovers its pending workflows
            while await done() < n:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    finally:
        for p in procs:
            if p.returncode is None:
                p.send_signal(signal.SIGKILL)
            await p.wait()
    counts: dict[str, int] = {}
    for name in ("doomed", "survivor"):
        for line in (tmp / f"{name}.ends").read_text().splitlines():
            counts[line] = counts.get(line, 0) + 1
    assert len(counts) == n, len(counts)
    return {"ran_twice": sum(1 for v in counts.values() if v > 1)}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--kill", action="store_true")
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--only", choices=["ator", "dbos"])
    parser.add_argument("--dbos-python", default=sys.executable,
                        help="a Python with dbos installed (default: this one)")
    args = parser.parse_args()
    server = await PgServer.start()
    out: dict[str, Any] = {"server": server.description, "items": args.items,
                           "load_average": os.getloadavg()}
    tally = Tally() if args.breakdown else None
    try:
        if args.only in (None, "ator"):
            url = await server.recreate("bench_wf_ator")
            from ator.engine.runtime import Ator
            from ator.settings import Settings
            async with await Ator.open(Settings(database_url=url), engine=False):
                pass  # migrations
            await server.settle(STATS_SETTLE_SECONDS)
            before = await server.counters("bench_wf_ator")
            mine = await ator_run(url, args.items, args.concurrency,
                                  Backends(server, "bench_wf_ator"), tally)
            await server.settle(STATS_SETTLE_SECONDS)
            mine["server_commits"] = (await server.counters("bench_wf_ator") - before).commits
            out["ator"] = mine
        if args.only in (None, "dbos"):
            url = await server.recreate("bench_wf_dbos")
            await server.settle(STATS_SETTLE_SECONDS)
            before = await server.counters("bench_wf_dbos")
            theirs = await dbos_run(url, args.items, args.concurrency,
                                    Backends(server, "bench_wf_dbos"), args.dbos_python)
            await server.settle(STATS_SETTLE_SECONDS)
            theirs["server_commits"] = (await server.counters("bench_wf_dbos") - before).commits
            out["dbos"] = theirs
        if args.kill:
            import tempfile
            url = await server.recreate("bench_wf_kill")
            from ator.engine.runtime import Ator
            from ator.settings import Settings
            async with await Ator.open(Settings(database_url=url), engine=False):
                pass
            with tempfile.TemporaryDirectory() as tmp:
                out["ator_sigkill"] = await ator_kill(url, args.items, args.concurrency,
                                                      Path(tmp))
            if args.only in (None, "dbos"):
                url = await server.recreate("bench_wf_dbos_kill")
                with tempfile.TemporaryDirectory() as tmp:
                    out["dbos_sigkill"] = await dbos_kill(url, args.items, args.concurrency,
                                                          Path(tmp), args.dbos_python)
    finally:
        await server.close()
    print(f"load average {out['load_average'][0]:.1f} at the start")
    for name in ("ator", "dbos"):
        if name in out:
            r = out[name]
            r["steps_per_s"] = r["steps"] / r["seconds"]
            r["commits_per_step"] = r["server_commits"] / r["steps"]
            extra = (f", {r['statements'] / r['steps']:.2f} statements and "
                     f"{r['commits'] / r['steps']:.2f} commits per step (client)"
                     if "statements" in r else "")
            print(f"{name:5} {r['steps']} steps in {r['seconds']:.2f} s = "
                  f"{r['steps_per_s']:.0f} steps/s; {r['commits_per_step']:.2f} server "
                  f"commits per step{extra}; CPU per step {1000 * r['cpu_s'] / r['steps']:.2f}"
                  f" ms (process) + {1000 * r['server_cpu_s'] / r['steps']:.2f} ms (server)")
            for text, per in r.get("breakdown", {}).items():
                print(f"      {per:6.3f}  {text}")
    if "ator" in out and "dbos" in out:
        out["ratio"] = out["ator"]["steps_per_s"] / out["dbos"]["steps_per_s"]
        print(f"ator / DBOS: {out['ratio']:.1f}x steps/s")
    if "ator_sigkill" in out:
        k = out["ator_sigkill"]
        print(f"ator after a SIGKILL: {k['ran_twice']} items ran twice (body to its end), "
              f"{k['claimed_twice']} claimed twice, {k['stored_twice']} stored twice")
    if "dbos_sigkill" in out:
        print(f"DBOS after a SIGKILL: {out['dbos_sigkill']['ran_twice']} items ran twice "
              f"(body to its end)")
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "workflows.json").write_text(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    asyncio.run(main())
