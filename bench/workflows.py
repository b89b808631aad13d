"""A 1,000-item `map` of trivial transforms: ator's workflows beside DBOS (bench).

```sh
ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/workflows.py
```

Same server, same run, each system on a fresh database of its own (`bench_wf_ator`,
`bench_wf_dbos`):

- ator: one process running the jobs worker (`--concurrency` handlers), a published recipe
  `map` over `[1..N]` of `item * 2`; timed from the start call until the run succeeded.
  Statements and commits are the client's (`Database.stats`), commits also the server's
  (`pg_stat_database.xact_commit`), per item step.
- DBOS 3.4: a parent workflow enqueueing N child workflows (one `@DBOS.step` each,
  `x * 2`) on a queue of the same concurrency, in a child process; timed from the parent's
  start until its result. Commits are the server's, per child.
- SIGKILL (`--kill`): ator's map on two `ator worker` processes, one SIGKILLed when a third
  of the items are done; the figure is how many items *ran* more than once (attempts with a
  claim) and how many were *stored* more than once (always 0: a stored output is never
  replaced). DBOS's figure is not measured here (see the closing note of issue 19).

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


async def ator_run(url: str, n: int, concurrency: int) -> dict[str, Any]:
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
        before = ator.db.stats.snapshot()
        started = time.perf_counter()
        run, _ = await flows.start(scope, wf["id"], {})
        seq, ended = 0, False
        while not ended:  # the run's own event log, long-polled (no sleeps)
            frames = await ator.wait_run_events(scope, run["id"], after_seq=seq, timeout=5)
            seq = frames[-1]["seq"] if frames else seq
            ended = any(f["type"] in ("run_succeeded", "run_failed") for f in frames)
        found = await flows.run(scope, run["id"])
        elapsed = time.perf_counter() - started
        statements, commits = (a - b for a, b in zip(ator.db.stats.snapshot(), before,
                                                     strict=True))
    assert found["status"] == "succeeded", found
    return {"seconds": elapsed, "steps": n, "statements": statements, "commits": commits}


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
t = time.perf_counter()
total = DBOS.start_workflow(parent, n).get_result()
print("RESULT", time.perf_counter() - t, total, flush=True)
DBOS.destroy()
'''


async def dbos_run(url: str, n: int, concurrency: int) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", DBOS_CHILD, url, str(n), str(concurrency),
        stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    line = [ln for ln in out.decode().splitlines() if ln.startswith("RESULT")][-1]
    _, seconds, total = line.split()
    assert int(total) == n * (n + 1), total
    return {"seconds": float(seconds), "steps": n}


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
            sys.executable, "-m", "ator.cli.main", "worker", stderr=log,
            env={**env, "ATOR_DATA_DIR": str(tmp / name), "ATOR_OWNER_ID": name}))
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
    return {"ran_twice": sum(1 for r in rows if r["ran"] > 1),
            "stored_twice": sum(1 for r in rows if r["stored"] > 1)}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--kill", action="store_true")
    parser.add_argument("--only", choices=["ator", "dbos"])
    args = parser.parse_args()
    server = await PgServer.start()
    out: dict[str, Any] = {"server": server.description, "items": args.items}
    try:
        if args.only in (None, "ator"):
            url = await server.recreate("bench_wf_ator")
            from ator.engine.runtime import Ator
            from ator.settings import Settings
            async with await Ator.open(Settings(database_url=url), engine=False):
                pass  # migrations
            await server.settle(STATS_SETTLE_SECONDS)
            before = await server.counters("bench_wf_ator")
            mine = await ator_run(url, args.items, args.concurrency)
            await server.settle(STATS_SETTLE_SECONDS)
            mine["server_commits"] = (await server.counters("bench_wf_ator") - before).commits
            out["ator"] = mine
        if args.only in (None, "dbos"):
            url = await server.recreate("bench_wf_dbos")
            await server.settle(STATS_SETTLE_SECONDS)
            before = await server.counters("bench_wf_dbos")
            theirs = await dbos_run(url, args.items, args.concurrency)
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
    finally:
        await server.close()
    for name in ("ator", "dbos"):
        if name in out:
            r = out[name]
            r["steps_per_s"] = r["steps"] / r["seconds"]
            r["commits_per_step"] = r["server_commits"] / r["steps"]
            extra = (f", {r['statements'] / r['steps']:.1f} statements and "
                     f"{r['commits'] / r['steps']:.1f} commits per step (client)"
                     if "statements" in r else "")
            print(f"{name:5} {r['steps']} steps in {r['seconds']:.2f} s = "
                  f"{r['steps_per_s']:.0f} steps/s; {r['commits_per_step']:.1f} server "
                  f"commits per step{extra}")
    if "ator" in out and "dbos" in out:
        out["ratio"] = out["ator"]["steps_per_s"] / out["dbos"]["steps_per_s"]
        print(f"ator / DBOS: {out['ratio']:.1f}x steps/s")
    if "ator_sigkill" in out:
        k = out["ator_sigkill"]
        print(f"ator after a SIGKILL: {k['ran_twice']} items ran twice, "
              f"{k['stored_twice']} stored twice")
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "workflows.json").write_text(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    asyncio.run(main())
