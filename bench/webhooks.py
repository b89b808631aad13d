"""10,000 webhook events delivered to a local receiver: deliveries/s and commit→receipt
latency (bench). No peer: this measures ator's own outbox → jobs → signed POST path.

```sh
ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \
    PYTHONPATH=src .venv/bin/python bench/webhooks.py [--events 10000] [--paced 2000]
```

A fresh database (`bench_webhooks`) on the server; one `Ator` with its jobs worker in this
process (the real `WebhooksExtension`: `webhooks.dispatch` fans each event out, then
`webhooks.deliver` signs and POSTs it through the egress guard, loopback allowlisted); one
org with one endpoint. The receiver is a separate process (aiohttp on 127.0.0.1) that
answers 200 and records when each `webhook-id` arrived; every 100th request is verified with
the `standardwebhooks` library.

- **burst**: `--events` events committed as fast as possible (`store.webhooks.emit`, 100 per
  transaction, each transaction's commit time recorded after it returns). deliveries/s =
  events ÷ (last receipt − first commit); latency includes the time an event waited in the
  queue behind the others.
- **paced**: `--paced` events, one per transaction, at `--rate` per second (default: half the
  burst's throughput), so latency is the pipeline's own rather than the backlog's.

Latency is receipt time − commit time, both `time.time()` on this machine. Results also go to
`bench/results/webhooks.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from pgserver import PgServer  # noqa: E402

# --- the receiver (child process) -------------------------------------------------------


async def receiver_child() -> None:
    from aiohttp import web
    from standardwebhooks.webhooks import Webhook

    arrived: dict[str, float] = {}
    secret: list[str] = []
    verified = [0]

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        msg_id = request.headers["webhook-id"]
        arrived.setdefault(msg_id, time.time())
        if secret and len(arrived) % 100 == 0:
            Webhook(secret[0]).verify(body, dict(request.headers))
            verified[0] += 1
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(json.dumps({"port": port}), flush=True)
    loop = asyncio.get_running_loop()
    secret.append((await loop.run_in_executor(None, sys.stdin.readline)).strip())
    await loop.run_in_executor(None, sys.stdin.readline)  # "report"
    print(json.dumps({"arrived": arrived, "verified": verified[0]}), flush=True)
    await runner.cleanup()


# --- the producer ------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def emit(ator: Any, org_id: uuid.UUID, count: int, per_tx: int,
               commits: dict[str, float], rate: float | None) -> None:
    from ator.store import webhook_outbox as store

    started = time.monotonic()
    sent = 0
    while sent < count:
        n = min(per_tx, count - sent)
        ids = []
        async with ator.db.begin() as conn:
            for k in range(n):
                made = await store.emit(conn, org_id, "turn.ended", {"n": sent + k})
                assert made is not None
                ids.append(f"msg_{made.hex}")
        now = time.time()
        for msg_id in ids:
            commits[msg_id] = now
        sent += n
        if rate:
            ahead = started + sent / rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)


async def run(events: int, paced: int, rate: float | None) -> dict[str, Any]:
    from ator import Ator
    from ator.settings import Settings
    from ator.store.scope import Scope
    from ator.webhooks import Webhooks

    server = await PgServer.start()
    receiver = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(__file__)), "--child", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, env=os.environ.copy(),
        limit=64 * 1024 * 1024)
    assert receiver.stdout is not None and receiver.stdin is not None
    port = json.loads(await asyncio.wait_for(receiver.stdout.readline(), 60))["port"]
    try:
        url = await server.recreate("bench_webhooks")
        settings = Settings(database_url=url, egress_allow=("127.0.0.1",),
                            job_poll_interval=0.2, db_pool_size=20)
        async with await Ator.open(settings) as ator:
            org = await ator.create_org("bench")
            _, secret = await ator.service(Webhooks).create_endpoint(
                Scope(org.id), url=f"http://127.0.0.1:{port}/hook")
            receiver.stdin.write(f"{secret}\n".encode())
            await receiver.stdin.drain()
            await ator.start_jobs()
            commits: dict[str, float] = {}
            first = time.time()
            await emit(ator, org.id, events, 100, commits, None)
            burst_ids = set(commits)
            done = await delivered(ator, org.id, events, timeout=600)
            burst_end = await last_finish(ator, org.id)
            burst_rate = events / max(burst_end - first, 1e-9)
            paced_rate = rate or max(1.0, burst_rate / 2)
            paced_start = len(commits)
            await emit(ator, org.id, paced, 1, commits, paced_rate)
            await delivered(ator, org.id, events + paced, timeout=600)
            receiver.stdin.write(b"report\n")
            await receiver.stdin.drain()
            report = json.loads(await asyncio.wait_for(receiver.stdout.readline(), 120))
    finally:
        if receiver.returncode is None:
            receiver.kill()
        await receiver.wait()
        await server.drop("bench_webhooks")
        await server.close()
    arrived: dict[str, float] = report["arrived"]
    burst = [arrived[i] - commits[i] for i in burst_ids if i in arrived]
    paced_ids = list(commits)[paced_start:]
    paced_lat = [arrived[i] - commits[i] for i in paced_ids if i in arrived]
    last_receipt = max(arrived[i] for i in burst_ids if i in arrived)
    return {
        "events": events, "delivered_db": done, "received": len(arrived),
        "verified_sample": report["verified"],
        "burst": {"deliveries_per_s": round(len(burst) / (last_receipt - first), 1),
                  "p50_ms": round(statistics.median(burst) * 1000, 1),
                  "p99_ms": round(pct(burst, 0.99) * 1000, 1),
                  "max_ms": round(max(burst) * 1000, 1)},
        "paced": {"events": paced, "rate_per_s": round(paced_rate, 1),
                  "p50_ms": round(statistics.median(paced_lat) * 1000, 1),
                  "p99_ms": round(pct(paced_lat, 0.99) * 1000, 1)} if paced_lat else None,
        "load_average": os.getloadavg(),
    }


async def delivered(ator: Any, org_id: uuid.UUID, want: int, timeout: float) -> int:
    """Wait (one count per 200 ms) until `want` deliveries are finished."""
    import sqlalchemy as sa

    deadline = time.monotonic() + timeout
    while True:
        rows = await ator.db.read(sa.text(
            "SELECT count(*) AS n FROM webhook_deliveries WHERE org_id = :o AND status "
            "<> 'pending'"), {"o": org_id})
        n = int(rows[0]["n"])
        if n >= want or time.monotonic() > deadline:
            return n
        await asyncio.sleep(0.2)


async def last_finish(ator: Any, org_id: uuid.UUID) -> float:
    import sqlalchemy as sa

    rows = await ator.db.read(sa.text(
        "SELECT EXTRACT(EPOCH FROM max(finished_at))::float AS t FROM webhook_deliveries "
        "WHERE org_id = :o"), {"o": org_id})
    return float(rows[0]["t"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--paced", type=int, default=2_000)
    parser.add_argument("--rate", type=float, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(receiver_child())
        return
    result = asyncio.run(run(args.events, args.paced, args.rate))
    print("peer: none (ator's own outbox → jobs → signed POST path)")
    b, p = result["burst"], result["paced"]
    print(f"burst: {result['events']} events, {result['received']} received "
          f"({result['verified_sample']} verified with standardwebhooks): "
          f"{b['deliveries_per_s']} deliveries/s; commit→receipt p50 {b['p50_ms']} ms, "
          f"p99 {b['p99_ms']} ms, max {b['max_ms']} ms (queueing included)")
    if p:
        print(f"paced: {p['events']} events at {p['rate_per_s']}/s: commit→receipt "
              f"p50 {p['p50_ms']} ms, p99 {p['p99_ms']} ms")
    print(f"load average {result['load_average']}")
    out = HERE / "results" / "webhooks.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
