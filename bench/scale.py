"""N conversations at once against a real `ator serve`, with LangGraph as the anchor (bench
harness; imports httpx, asyncpg, psutil, psycopg, langgraph, ator.testing.paced).

Each round: N new threads each POST one message at the same moment; the model (the
`ator.testing.paced` OpenAI-compatible fake, in its own process) streams every reply over
`--duration` seconds. Measured from outside the server:

- all done: from the first POST to the last turn's `ended_at`;
- POST p50/p99: time to the 202;
- start lag p50/p99: turn `started_at` minus its POST's 202 (the acceptance asks p99 < 1 s);
- peak turns in flight: most `running` turns seen by a 100 ms sampler;
- lost: turns that ended `error:lost`; failed: every turn that ended other than `done` (each
  status is also counted by kind below the table);
- engine overhead p50/p99: (turn `ended_at` - POST sent) - the model's stream time;
- /healthz p99: a prober hitting /healthz back to back during the burst;
- RSS per in-flight turn: (peak RSS of the server's process tree - RSS before) / peak in flight;
- PG connections: peak `pg_stat_activity` rows of the server's database.

LangGraph: `create_react_agent` + `AsyncPostgresSaver` on a psycopg pool, in-process (it has no
HTTP front of its own), N `ainvoke`s at once on new threads, its chat model streaming from the
same paced fake over HTTP. Overhead = turn time - stream time; "all done" the same way.

    ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/scale.py --n 100 300 1000 [--serve-arg=--workers=2] [--burn]

`--burn` runs everything beside a CPU-burning process (one busy loop on a core).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import asyncpg
import httpx
import psutil
from burn import cpu_burner

RESULTS = Path(__file__).parent / "results" / "scale.json"


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


@dataclass
class Round:
    system: str
    n: int
    all_done_s: float = 0.0
    post_p50_ms: float = float("nan")
    post_p99_ms: float = float("nan")
    start_lag_p50_ms: float = float("nan")
    start_lag_p99_ms: float = float("nan")
    peak_in_flight: int = 0
    lost: int = 0
    failed: int = 0  # turns that ended other than done (lost ones included)
    statuses: dict[str, int] = field(default_factory=dict)
    overhead_p50_ms: float = float("nan")
    overhead_p99_ms: float = float("nan")
    healthz_p99_ms: float = float("nan")
    rss_per_turn_kb: float = float("nan")
    pg_connections: int = 0
    http_errors: int = 0
    never_ended: int = 0
    server_cpu_s: float = 0.0
    loop_lag_max_ms: float = 0.0
    client_cpu_s: float = 0.0
    model_cpu_s: float = 0.0
    machine_busy_pct: float = 0.0
    error_codes: dict[str, int] = field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def db_url(base: str, name: str) -> str:
    head, _, _ = base.rpartition("/")
    return f"{head}/{name}"


async def fresh_db(admin_url: str, name: str) -> None:
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


def start_model(duration: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ator.testing.paced", "--duration", str(duration)],
        stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("ready "):
        raise RuntimeError(f"paced model did not start: {line!r}")
    return proc, line.split(" ", 1)[1]


class Server:
    """`ator serve` in a subprocess, on a fresh database."""

    def __init__(self, url: str, serve_args: list[str], pool_size: int,
                 extra_env: dict[str, str]) -> None:
        self.url = url
        self.extra_env = extra_env
        self.port = free_port()
        self.key = f"ator_{secrets.token_hex(4)}_{secrets.token_urlsafe(24)}"
        self.metrics_token = secrets.token_urlsafe(16)
        self.data_dir = tempfile.mkdtemp(prefix="ator-scale-")
        self.serve_args = serve_args
        self.pool_size = pool_size
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        env = {**os.environ, "ATOR_DATABASE_URL": self.url, "ATOR_BOOTSTRAP_KEY": self.key,
               "ATOR_METRICS_TOKEN": self.metrics_token, "ATOR_EGRESS_ALLOW": "127.0.0.1",
               "ATOR_DATA_DIR": self.data_dir, "ATOR_LOG_LEVEL": "WARNING",
               "ATOR_DB_POOL_SIZE": str(self.pool_size),
               "ATOR_RATE_LIMIT_PER_MINUTE": "0", **self.extra_env}
        self.proc = await asyncio.to_thread(
            subprocess.Popen,
            [sys.executable, "-m", "ator.cli.main", "serve", "--port", str(self.port),
             *self.serve_args], env=env)
        async with httpx.AsyncClient() as client:
            for _ in range(3000):  # a fresh database's migrations on a busy machine
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(self.base + "/readyz")).status_code == 200:
                        return
                if self.proc.poll() is not None:
                    raise RuntimeError("ator serve exited")
                await asyncio.sleep(0.1)
        raise RuntimeError("ator serve did not become ready")

    def rss(self) -> int:
        assert self.proc is not None
        try:
            root = psutil.Process(self.proc.pid)
            return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
        except psutil.Error:
            return 0

    def cpu(self) -> float:
        """User + system CPU seconds of the server's process tree so far."""
        assert self.proc is not None
        try:
            root = psutil.Process(self.proc.pid)
            total = 0.0
            for p in [root, *root.children(recursive=True)]:
                t = p.cpu_times()
                total += t.user + t.system
            return total
        except psutil.Error:
            return 0.0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def cpu_of(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


async def raw_post(port: int, path: str, authorization: str, body: bytes) -> tuple[int, bytes]:
    """One POST on a new connection, as a user's client would send it; answers (status,
    body). The burst's client is raw asyncio rather than httpx: on the same 2 cores, httpx's
    own CPU per request (its pool scans every connection) delayed the POSTs it measured."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
                     f"authorization: {authorization}\r\ncontent-type: application/json\r\n"
                     f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                     + body)
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await reader.readexactly(length)
    finally:
        writer.close()


async def ator_round(server: Server, model_url: str, n: int, duration: float,
                     dbname: str, model_pid: int) -> Round:
    headers = {"authorization": f"Bearer {server.key}"}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    timeout = httpx.Timeout(120.0)
    result = Round("ator", n)
    async with httpx.AsyncClient(base_url=server.base, headers=headers, limits=limits,
                                 timeout=timeout) as client:
        setup = (await client.post("/v1/setups", json={
            "name": f"scale-{n}-{uuid.uuid4().hex[:6]}", "provider": "openai",
            "model": "gpt-4o-mini", "config": {"base_url": model_url}})).raise_for_status()
        setup_id = setup.json()["id"]
        threads: list[str] = []
        for _ in range(n):
            r = await client.post("/v1/threads", json={"setup_id": setup_id})
            threads.append(r.raise_for_status().json()["id"])
        conn = await asyncpg.connect(server.url)
        rss_before = server.rss()
        peak_rss = rss_before
        done = asyncio.Event()
        health: list[float] = []

        async def sample() -> None:
            nonlocal peak_rss
            ids = [uuid.UUID(t) for t in threads]
            while True:
                running, ended = await conn.fetchrow(
                    "SELECT count(*) FILTER (WHERE status='running'),"
                    " count(*) FILTER (WHERE ended_at IS NOT NULL)"
                    " FROM turns WHERE thread_id = ANY($1)", ids)
                conns = await conn.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname=$1", dbname)
                result.peak_in_flight = max(result.peak_in_flight, running)
                result.pg_connections = max(result.pg_connections, conns - 1)
                peak_rss = max(peak_rss, server.rss())
                if posted.is_set() and ended >= len(accepted):
                    done.set()
                    return
                await asyncio.sleep(0.1)

        async def probe() -> None:
            async with httpx.AsyncClient(base_url=server.base, timeout=timeout) as c:
                while not done.is_set():
                    began = time.perf_counter()
                    await c.get("/healthz")
                    health.append(time.perf_counter() - began)
                    if len(health) % 10 == 0:
                        load = (await c.get("/readyz")).json().get("load") or {}
                        result.loop_lag_max_ms = max(result.loop_lag_max_ms,
                                                     1e3 * load.get("loop_lag_s", 0.0))
                    await asyncio.sleep(0.02)

        sent: dict[str, float] = {}
        answered: dict[str, float] = {}
        accepted: set[str] = set()
        posted = asyncio.Event()

        async def post(tid: str) -> None:
            sent[tid] = time.time()
            status, body = await raw_post(server.port, f"/v1/threads/{tid}/messages",
                                          headers["authorization"], b'{"text":"Hello"}')
            answered[tid] = time.time()
            if status != 202:
                result.http_errors += 1
                try:
                    code = f"{status} {json.loads(body).get('code')}"
                except ValueError:
                    code = str(status)
                result.error_codes[code] = result.error_codes.get(code, 0) + 1
            else:
                accepted.add(tid)

        cpu0 = server.cpu()
        others0 = cpu_of(os.getpid()), cpu_of(model_pid), psutil.cpu_times()
        t0 = time.time()
        print(f"burst n={n} at {t0:.3f}", flush=True)
        sampler = asyncio.create_task(sample())
        prober = asyncio.create_task(probe())
        outcomes = await asyncio.gather(*(post(t) for t in threads), return_exceptions=True)
        for o in outcomes:
            if isinstance(o, BaseException):
                result.http_errors += 1
                name = type(o).__name__
                result.error_codes[name] = result.error_codes.get(name, 0) + 1
        posted.set()
        try:
            await asyncio.wait_for(sampler, timeout=120)
        except TimeoutError:
            print(f"n={n}: not every accepted message ended within 120 s", flush=True)
        finally:
            done.set()
            await prober
        result.server_cpu_s = server.cpu() - cpu0
        result.client_cpu_s = cpu_of(os.getpid()) - others0[0]
        result.model_cpu_s = cpu_of(model_pid) - others0[1]
        now = psutil.cpu_times()
        busy = sum(getattr(now, f) - getattr(others0[2], f) for f in ("user", "system", "nice"))
        result.machine_busy_pct = 100 * busy / ((time.time() - t0) * (psutil.cpu_count() or 1))
        rows = await conn.fetch(
            "SELECT thread_id::text AS t, status, stop_reason, extract(epoch FROM started_at)"
            " AS s, extract(epoch FROM ended_at) AS e FROM turns WHERE thread_id = ANY($1)",
            [uuid.UUID(t) for t in threads])
        await conn.close()
    result.never_ended = len(accepted) - sum(1 for r in rows if r["e"] is not None
                                             and r["t"] in accepted)
    result.all_done_s = max(float(r["e"]) for r in rows if r["e"] is not None) - t0
    posts = [answered[t] - sent[t] for t in answered]
    result.post_p50_ms, result.post_p99_ms = pct(posts, .5) * 1e3, pct(posts, .99) * 1e3
    lags = [float(r["s"]) - answered[r["t"]] for r in rows if r["t"] in answered]
    result.start_lag_p50_ms, result.start_lag_p99_ms = pct(lags, .5) * 1e3, pct(lags, .99) * 1e3
    over = [float(r["e"]) - sent[r["t"]] - duration for r in rows if r["t"] in sent]
    result.overhead_p50_ms, result.overhead_p99_ms = pct(over, .5) * 1e3, pct(over, .99) * 1e3
    for r in rows:
        key = f"{r['status']}:{r['stop_reason']}"
        result.statuses[key] = result.statuses.get(key, 0) + 1
    result.lost = sum(1 for r in rows if r["stop_reason"] == "error:lost")
    result.failed = sum(1 for r in rows if r["status"] != "done")
    result.healthz_p99_ms = pct(health, .99) * 1e3
    if result.peak_in_flight:
        result.rss_per_turn_kb = (peak_rss - rss_before) / 1024 / result.peak_in_flight
    return result


async def langgraph_round(url: str, model_url: str, n: int, duration: float,
                          pool_size: int) -> Round:
    from scale_langgraph import LangGraphScale

    result = Round("LangGraph", n)
    system = await LangGraphScale.open(url, model_url, pool_size)
    try:
        rss_before = psutil.Process().memory_info().rss
        peak_rss = rss_before
        in_flight = 0
        ends: list[float] = []
        overheads: list[float] = []
        errors = 0
        stop = asyncio.Event()

        async def sample() -> None:
            nonlocal peak_rss
            conn = await asyncpg.connect(url)
            dbname = url.rpartition("/")[2]
            try:
                while not stop.is_set():
                    conns = await conn.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname=$1", dbname)
                    result.pg_connections = max(result.pg_connections, conns - 1)
                    peak_rss = max(peak_rss, psutil.Process().memory_info().rss)
                    await asyncio.sleep(0.1)
            finally:
                await conn.close()

        async def turn() -> None:
            nonlocal in_flight, errors
            began = time.time()
            in_flight += 1
            result.peak_in_flight = max(result.peak_in_flight, in_flight)
            try:
                stream = await system.turn(uuid.uuid4())
                overheads.append(time.time() - began - stream)
            except Exception:
                errors += 1
            finally:
                in_flight -= 1
                ends.append(time.time())

        sampler = asyncio.create_task(sample())
        t0 = time.time()
        await asyncio.gather(*(turn() for _ in range(n)))
        stop.set()
        await sampler
        result.all_done_s = max(ends) - t0
        result.overhead_p50_ms = pct(overheads, .5) * 1e3
        result.overhead_p99_ms = pct(overheads, .99) * 1e3
        result.lost = errors
        result.statuses = {"done": n - errors, "error": errors}
        if result.peak_in_flight:
            result.rss_per_turn_kb = (peak_rss - rss_before) / 1024 / result.peak_in_flight
    finally:
        await system.close()
    return result


def show(rounds: list[Round]) -> None:
    cols = ["system", "n", "all_done_s", "post_p50_ms", "post_p99_ms", "start_lag_p50_ms",
            "start_lag_p99_ms", "peak_in_flight", "lost", "failed", "overhead_p50_ms",
            "overhead_p99_ms", "healthz_p99_ms", "rss_per_turn_kb", "pg_connections",
            "http_errors", "never_ended", "server_cpu_s", "loop_lag_max_ms", "client_cpu_s",
            "model_cpu_s", "machine_busy_pct"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rounds:
        cells = []
        for c in cols:
            v = getattr(r, c)
            cells.append(f"{v:.1f}" if isinstance(v, float) else str(v))
        print("| " + " | ".join(cells) + " |")
    for r in rounds:
        print(f"{r.system} n={r.n}: {json.dumps(r.statuses)} errors {json.dumps(r.error_codes)}")
    for r in rounds:
        if r.system == "ator" and r.n:
            print(f"ator n={r.n}: server CPU {r.server_cpu_s * 1000 / r.n:.2f} ms per turn "
                  "(load-robust)")


# The acceptance targets of a round of 1,000 (issue 26), checked for every n.
TARGET_ALL_DONE_S = 4.0
TARGET_POST_P99_MS = 1500.0
TARGET_START_LAG_P99_MS = 200.0
TARGET_RATIO = 5.0


def checks(rounds: list[Round]) -> list[str]:
    """Each ator round against the targets, and against LangGraph's of the same n in this
    same run: `PASS`/`FAIL` lines."""
    lines = []
    peers = {r.n: r for r in rounds if r.system == "LangGraph"}
    for r in rounds:
        if r.system != "ator":
            continue
        found = [
            (f"all done <= {TARGET_ALL_DONE_S:g} s", r.all_done_s <= TARGET_ALL_DONE_S,
             f"{r.all_done_s:.2f} s"),
            ("0 lost, 0 failed", r.lost == 0 and r.failed == 0, f"{r.lost} / {r.failed}"),
            (f"POST p99 <= {TARGET_POST_P99_MS:g} ms", r.post_p99_ms <= TARGET_POST_P99_MS,
             f"{r.post_p99_ms:.0f} ms"),
            (f"start lag p99 <= {TARGET_START_LAG_P99_MS:g} ms",
             r.start_lag_p99_ms <= TARGET_START_LAG_P99_MS, f"{r.start_lag_p99_ms:.0f} ms"),
        ]
        peer = peers.get(r.n)
        if peer is not None and r.all_done_s > 0:
            ratio = peer.all_done_s / r.all_done_s
            found.append((f"LangGraph all done / ator's >= {TARGET_RATIO:g}",
                          ratio >= TARGET_RATIO, f"{ratio:.2f}"))
        for name, ok, value in found:
            lines.append(f"  {'PASS' if ok else 'FAIL'} n={r.n} {name} ({value})")
    return lines


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--pool-size", type=int, default=20)
    parser.add_argument("--only", choices=["ator", "langgraph"])
    parser.add_argument("--serve-arg", action="append", default=[])
    parser.add_argument("--label", default="")
    parser.add_argument("--env", action="append", default=[],
                        help="KEY=VALUE for the server, e.g. ATOR_REDIS_URL=redis://...")
    parser.add_argument("--burn", action="store_true",
                        help="run every round beside a CPU-burning process (both systems)")
    args = parser.parse_args()
    admin = os.environ.get("ATOR_DATABASE_URL")
    if not admin:
        sys.exit("set ATOR_DATABASE_URL to a PostgreSQL server (an admin database URL)")
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    model, model_url = start_model(args.duration)
    rounds: list[Round] = []
    with cpu_burner(args.burn):
        await compare(args, admin, model, model_url, rounds)
    show(rounds)
    for line in checks(rounds):
        print(line)
    print(f"load average: {load_before} before, "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} after ({os.cpu_count()} CPUs)"
          + (", beside a CPU-burning process" if args.burn else ""))
    RESULTS.parent.mkdir(exist_ok=True)
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    label = (args.label or time.strftime("%Y-%m-%dT%H:%M:%S")) + ("_burn" if args.burn else "")
    previous[label] = [asdict(r) for r in rounds]
    RESULTS.write_text(json.dumps(previous, indent=1, default=str))


async def compare(args: argparse.Namespace, admin: str, model: subprocess.Popen[str],
                  model_url: str, rounds: list[Round]) -> None:
    """ator's rounds, then LangGraph's, appended to `rounds` as each ends."""
    try:
        if args.only != "langgraph":
            await fresh_db(admin, "bench_scale")
            server = Server(db_url(admin, "bench_scale"), args.serve_arg, args.pool_size,
                            dict(e.split("=", 1) for e in args.env))
            await server.start()
            try:
                for n in args.n:
                    rounds.append(await ator_round(server, model_url, n, args.duration,
                                                   "bench_scale", model.pid))
                    print(rounds[-1], flush=True)
            finally:
                server.stop()
        if args.only != "ator":
            await fresh_db(admin, "bench_scale_lg")
            for n in args.n:
                rounds.append(await langgraph_round(db_url(admin, "bench_scale_lg"), model_url,
                                                    n, args.duration, args.pool_size))
                print(rounds[-1], flush=True)
    finally:
        model.terminate()
        model.wait(10)


if __name__ == "__main__":
    asyncio.run(main())
