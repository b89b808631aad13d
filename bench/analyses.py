"""10,000 analyses of a trivial kind with a 50% cache-hit mix, beside the same number of
no-op jobs on the same queue (bench).

```sh
ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/analyses.py
```

One process, one fresh database (`bench_analyses`), one org without a budget limit and one
with (so each model call reserves and settles in the ledger). The kind is trivial: a
payload input keyed by `n`, the scripted provider answering `{"n": 1}`, a schema and a
vocabulary-free validation, apply `record`. Jobs `i` and `i + N/2` carry the same `n`, so the
second half finds the first half's analyses (the hit ratio actually measured is printed).
Timed: from queueing the jobs for the running worker to the last job done (polled every
50 ms; those polls' statements and the enqueue statements are subtracted). Statements per
analysis come from `Database.stats` (client side). The peer is the jobs kernel alone: the
same number of no-op jobs on the same worker settings; the ratio says what the analysis
pipeline costs over a bare job.
Flags: --analyses (10000), --concurrency (50). Results go to bench/results/analyses.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from pgserver import PgServer  # noqa: E402


async def _drain(ator: Any, scope: Any, kind: str, bodies: list[dict[str, Any]]
                 ) -> tuple[float, int]:
    """Queue `bodies` (1,000 a statement) for the running worker and wait until all are
    done; (seconds, statements of the work itself)."""
    from ator.jobs import JobQueue

    queue = ator.service(JobQueue)
    before = ator.db.stats.statements
    polls = 0
    started = time.perf_counter()
    for i in range(0, len(bodies), 1000):
        await queue.enqueue_many(scope, kind, bodies[i:i + 1000])
        polls += 1
    while (await queue.counts(scope, kind)).get("done", 0) < len(bodies):
        polls += 1
        await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - started
    return elapsed, ator.db.stats.statements - before - polls


async def run(n: int, concurrency: int) -> dict[str, Any]:
    from ator import Ator
    from ator.agent.extension import Extension, Kernel
    from ator.analyses import RUN, Analyses, AnalysisKind
    from ator.analyses.inputs import payload
    from ator.engine.root import DEFAULT_EXTENSIONS
    from ator.jobs import JobKind
    from ator.providers.scripted import ScriptedProvider, ScriptStep
    from ator.settings import Settings
    from ator.store import analyses as store
    from ator.store.scope import Scope

    async def noop(ctx: Any, body: dict[str, Any]) -> None:
        return None

    class Noop(Extension):
        def __init__(self, kernel: Kernel) -> None:
            pass

        def job_kinds(self) -> list[Any]:
            return [JobKind("bench.noop", noop)]

    server = await PgServer.start()
    try:
        url = await server.recreate("bench_analyses")
        settings = Settings(database_url=url, db_pool_size=20, job_concurrency=concurrency,
                            job_batch=concurrency, job_poll_interval=1.0, run_jobs=False,
                            prices={"bench-model": {"input": "0.1", "output": "0.1"}})
        provider = ScriptedProvider([ScriptStep(text='{"n": 1}')], repeat_last=True)
        ator = await Ator.open(settings, providers={"bench": provider},
                               extensions=(*DEFAULT_EXTENSIONS, Noop))
        out: dict[str, Any] = {"server": server.description, "analyses": n,
                               "concurrency": concurrency}
        try:
            analyses = ator.service(Analyses)
            analyses.define(AnalysisKind(
                name="bench_trivial", input=payload, key_fields=("n",), provider="bench",
                model="bench-model", schema={"type": "object", "required": ["n"]},
                rule=lambda data: {"n": 0}, max_tokens=16))
            await ator.start_jobs()  # idle between phases: LISTEN wakes it, polls are rare
            for label, budget in (("no_budget", None), ("budget", Decimal("1000"))):
                org = await ator.create_org(f"bench-{label}", monthly_budget_usd=budget)
                scope = Scope(org.id)
                half = n // 2
                bodies = [{"kind": "bench_trivial", "target": "t", "origin": "bench",
                           "options": {"payload": {"n": i % half}}, "then": [],
                           "org": str(org.id)} for i in range(n)]
                seconds, statements = await _drain(ator, scope, RUN, bodies)
                [stat] = await store.stats(ator.db, scope)
                out[label] = {"seconds": round(seconds, 2),
                              "analyses_per_s": round(n / seconds, 1),
                              "statements_per_analysis": round(statements / n, 2),
                              "cache_hits": stat["cache_hits"],
                              "model_calls": stat["model_calls"],
                              "hit_ratio": round(stat["cache_hits"] / n, 3)}
            peer = await ator.create_org("bench-noop")
            pscope = Scope(peer.id)
            seconds, statements = await _drain(ator, pscope, "bench.noop", [{}] * n)
            out["noop_jobs"] = {"seconds": round(seconds, 2),
                                "jobs_per_s": round(n / seconds, 1),
                                "statements_per_job": round(statements / n, 2)}
            for label in ("no_budget", "budget"):
                out[label]["ratio_vs_noop_jobs"] = round(
                    out[label]["analyses_per_s"] / out["noop_jobs"]["jobs_per_s"], 3)
        finally:
            await ator.close()
        await server.drop("bench_analyses")
        return out
    finally:
        await server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--analyses", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=50)
    args = parser.parse_args()
    out = asyncio.run(run(args.analyses, args.concurrency))
    print(f"{out['server']}; {out['analyses']} analyses per org, 50% cache-hit mix")
    for label in ("no_budget", "budget"):
        r = out[label]
        print(f"  {label:9}: {r['analyses_per_s']:8.1f} analyses/s, "
              f"{r['statements_per_analysis']:.2f} statements/analysis, "
              f"hits {r['cache_hits']} ({r['hit_ratio']:.1%}), model calls {r['model_calls']}, "
              f"{r['ratio_vs_noop_jobs']:.3f}x the no-op job rate")
    j = out["noop_jobs"]
    print(f"  peer (no-op jobs on the same queue): {j['jobs_per_s']:.1f} jobs/s, "
          f"{j['statements_per_job']:.2f} statements/job")
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "analyses.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("ATOR_LOG_LEVEL", "WARNING")
    main()
