"""Token delta delivery over the socket gateway with many sockets (bench entry point; imports
ator for provisioning, python-socketio's client, and realtime_server next to it).

    ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/realtime_latency.py [--sockets 1000] [--turns 50]
        [--tokens 40] [--interval 0.05] [--stagger 1.0] [--replicas 1|2]
        [--redis redis://127.0.0.1:6379/15] [--burn]

Starts `--replicas` real server processes (bench/realtime_server.py, on Redis when 2) on a
fresh database, connects `--sockets` socket.io clients (WebSocket) spread over the replicas,
each joined to one of `--turns` threads, then starts one turn per thread whose model streams
`--tokens` tokens `--interval` s apart, each token carrying the time it was produced; the
turns' first messages are spread over `--stagger` seconds (0: all at once).

Reported, per received delta frame: latency = receipt at the client - production time of the
frame's LAST token (an upper bound of publish -> receipt: the publisher flushes a batch at
most 30 ms after its first token and never before its last), and the same from the FIRST
token (what a reader sees end to end, coalescing included); server memory per connection
(RSS growth over the sockets). The clients share this one process, so their own work is
inside the figures. Goal: p99 < 100 ms on one replica. Exits 1 when missed (one replica).

`--burn` runs the session twice, idle and then beside a CPU-burning process (one busy
Python loop for the whole run), and prints both; the goal beside it is p99 < 200 ms.

Timings on a shared machine are noisy, so each run also reports figures that do not depend
on the load, from the servers themselves (bench/realtime_server.py's BENCH_STATS): server
CPU per delivered delta frame, JSON encodes and WebSocket sends per delivered frame, and the
event loop's lag while streaming; and the load average at the start and the end.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import contextlib
import gc
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import httpx
from burn import cpu_burner
from realtime_server import Tick

from ator import Ator, Scope, Settings
from ator.store import keys as key_store
from ator.store import orgs as org_store

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "realtime_latency.json"
GOAL_P99_MS = 100.0
GOAL_P99_BURN_MS = 200.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _launch(port: int, args: argparse.Namespace, env: dict[str, str], log: Path
            ) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, str(HERE / "realtime_server.py"), str(port), str(args.tokens),
             str(args.interval)], env=env, stdout=out, stderr=out)


def _server_stats(proc: subprocess.Popen[bytes], path: Path) -> dict[str, Any]:
    """What the replica counted so far (bench/realtime_server.py writes it on SIGUSR1);
    blocking: call it in a thread."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not path.exists() or path.stat().st_mtime_ns == before:
        if time.monotonic() > deadline:
            raise RuntimeError("the replica wrote no stats in 10 s")
        time.sleep(0.02)  # a file written by another process: nothing to wait on
    figures: dict[str, Any] = json.loads(path.read_text())
    return figures


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


class Receiver:
    """A lean socket.io client (Engine.IO 4 over one WebSocket, the frames parsed by hand):
    a load generator must cost less than what it measures, and python-socketio's client
    makes a task per event."""

    def __init__(self, stats: dict[str, Any]) -> None:
        self.stats = stats
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.reader: asyncio.Task[None] | None = None
        self._acks: dict[int, asyncio.Future[Any]] = {}
        self._next = 0
        self.thread_id: str | None = None
        self.ended_at: float | None = None  # its thread's turn_ended, from the thread room
        self.org_ended_at: float | None = None  # its thread's turn.ended, from the org room

    async def connect(self, http: aiohttp.ClientSession, base: str, key: str) -> None:
        url = base.replace("http://", "ws://") + "/socket.io/?EIO=4&transport=websocket"
        self.ws = await http.ws_connect(url, autoping=True, max_msg_size=0)
        opened = await self.ws.receive_str()
        assert opened.startswith("0"), opened
        await self.ws.send_str("40" + json.dumps({"key": key}))
        answer = await self.ws.receive_str()
        while answer == "2":  # a ping came first (a slow connect): answer it, read on
            await self.ws.send_str("3")
            answer = await self.ws.receive_str()
        if not answer.startswith("40"):
            raise RuntimeError(f"connect refused: {answer}")
        self.reader = asyncio.create_task(self._read())

    async def call(self, event: str, payload: dict[str, Any]) -> Any:
        assert self.ws is not None
        self._next += 1
        ack = self._acks[self._next] = asyncio.get_running_loop().create_future()
        await self.ws.send_str(f"42{self._next}" + json.dumps([event, payload]))
        async with asyncio.timeout(30):
            return await ack

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
        if self.ws is not None:
            await self.ws.close()

    async def _read(self) -> None:
        assert self.ws is not None
        async for msg in self.ws:
            data = msg.data
            if data == "2":
                await self.ws.send_str("3")
            elif data.startswith('42["frame",'):
                self.frame(time.time(), json.loads(data[11:-1]))
            elif data.startswith("43"):
                head = data[2:data.index("[")]
                fut = self._acks.pop(int(head), None)
                if fut is not None and not fut.done():
                    fut.set_result(json.loads(data[2 + len(head):])[0])
        self.stats["disconnects"] += 1

    def frame(self, now: float, frame: dict[str, Any]) -> None:
        if frame["type"] == "delta":
            stamps = [float(t) for d in frame["data"]["deltas"]
                      for t in d.get("text", "").split()]
            if stamps:
                self.stats["last"].append((now - max(stamps)) * 1000)
                self.stats["raw"].append((now, self.stats["last"][-1]))
                self.stats["first"].append((now - min(stamps)) * 1000)
                self.stats["tokens"] += len(stamps)
        elif frame["type"] == "turn.ended":  # the org room's notice, for every thread
            self.stats["org_ended"] += 1
            if frame["data"]["thread_id"] == self.thread_id:
                self.org_ended_at = now
            if self.stats["org_ended"] >= self.stats["want_org_ended"]:
                self.stats["org_done"].set()
        elif frame["type"] == "turn_ended":
            self.ended_at = now
            self.stats["ended"] += 1
            self.stats["ended_by_thread"][frame["data"]["thread_id"]] += 1
            if self.stats["ended"] >= self.stats["want_ended"]:
                self.stats["done"].set()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    admin = os.environ.get("ATOR_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"ator_bench_rt_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(admin)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    db_url = admin.rsplit("/", 1)[0] + f"/{name}"
    data_dir = Path(tempfile.mkdtemp(prefix="ator-bench-rt-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATOR_")}
    env.update({
        "ATOR_DATABASE_URL": db_url, "ATOR_DATA_DIR": str(data_dir),
        "ATOR_MASTER_KEY": base64.b64encode(secrets.token_bytes(32)).decode(),
        "ATOR_MAX_SOCKETS_PER_USER": str(args.sockets), "ATOR_MAX_SOCKETS_PER_ORG":
        str(args.sockets), "ATOR_RATE_LIMIT_PER_MINUTE": "0", "ATOR_LOG_LEVEL": "WARNING",
        "ATOR_DB_POOL_SIZE": "10",
    })
    if args.server_gc:  # else the servers run with ator's own default (settings.py)
        env["ATOR_GC_THRESHOLDS"] = ("[]" if args.server_gc == "python"
                                     else "[" + args.server_gc + "]")
    if args.replicas > 1:
        env["ATOR_REDIS_URL"] = args.redis
        env["ATOR_REDIS_PREFIX"] = f"ator-bench-{uuid.uuid4().hex[:8]}:"
    settings = Settings(database_url=db_url, data_dir=data_dir,
                        master_key=env["ATOR_MASTER_KEY"])
    procs: list[subprocess.Popen[bytes]] = []
    clients: list[Receiver] = []
    http: aiohttp.ClientSession | None = None
    try:
        async with await Ator.open(settings, providers={"tick": Tick(1, 0)},
                                   engine=False) as ator:
            org = await ator.create_org("bench")
            scope = Scope(org.id)
            setup = await ator.create_setup(scope, name="tick", provider="tick", model="tick")
            threads = [(await ator.create_thread(scope, setup.id)).id
                       for _ in range(args.turns)]
            user = await org_store.create_user(ator.db, scope, "bench@x", "member")
            _, key = await key_store.create_key(ator.db, scope, user_id=user, name="b",
                                                role="member")
        urls = []
        for i in range(args.replicas):
            port = _port()
            procs.append(_launch(port, args, {**env, "ATOR_OWNER_ID": f"bench-{i}",
                                              "BENCH_STATS": str(data_dir / f"stats{i}.json")},
                                 data_dir / f"replica{i}.log"))
            urls.append(f"http://127.0.0.1:{port}")
        async with httpx.AsyncClient() as probe:
            for url, proc in zip(urls, procs, strict=True):
                deadline = time.monotonic() + 180
                while True:  # process start: nothing to wait on but the port
                    if proc.poll() is not None:
                        raise RuntimeError(f"replica exited; see {data_dir}")
                    try:
                        if (await probe.get(f"{url}/readyz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    if time.monotonic() > deadline:
                        raise RuntimeError("replica not ready in 180 s")
                    await asyncio.sleep(0.2)
        rss_before = [_rss_kib(p.pid) for p in procs]
        stats: dict[str, Any] = {"last": [], "first": [], "tokens": 0, "ended": 0,
                                 "disconnects": 0, "raw": [],
                                 "ended_by_thread": collections.Counter(),
                                 "want_ended": args.sockets, "done": asyncio.Event(),
                                 "org_ended": 0, "org_lag": [], "org_done": asyncio.Event(),
                                 "want_org_ended": args.sockets * args.turns}
        t0 = time.monotonic()
        http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        for start in range(0, args.sockets, 50):
            batch = [Receiver(stats) for _ in range(start, min(args.sockets, start + 50))]
            await asyncio.gather(*(
                c.connect(http, urls[(start + j) % len(urls)], key)
                for j, c in enumerate(batch)))
            for j, c in enumerate(batch):
                c.thread_id = str(threads[(start + j) % len(threads)])
            acks = await asyncio.gather(*(
                c.call("join", {"thread_id": c.thread_id}) for c in batch))
            assert all(a["ok"] for a in acks), acks
            clients.extend(batch)
        connect_s = time.monotonic() - t0
        rss_after = [_rss_kib(p.pid) for p in procs]
        stats_before = [await asyncio.to_thread(_server_stats, p, data_dir / f"stats{i}.json")
                        for i, p in enumerate(procs)]
        t1 = time.monotonic()
        cpu_server, cpu_clients = [_cpu_s(p.pid) for p in procs], time.process_time()
        async def start(i: int, thread_id: uuid.UUID) -> dict[str, Any]:
            await asyncio.sleep(args.stagger * i / len(threads))  # turns start spread out
            ack: dict[str, Any] = await clients[i].call(
                "send", {"thread_id": str(thread_id), "text": "go"})
            return ack

        acks = await asyncio.gather(*(start(i, t) for i, t in enumerate(threads)))
        assert all(a["ok"] for a in acks), acks
        try:
            await asyncio.wait_for(stats["done"].wait(),
                                   timeout=args.tokens * args.interval + args.stagger + 60)
        except TimeoutError:
            print(f"not every socket saw its turn end: {stats['ended']} of {args.sockets}",
                  file=sys.stderr)
            conn = await asyncpg.connect(db_url)
            for t in threads:
                if stats["ended_by_thread"][str(t)] < args.sockets // args.turns:
                    rows = await conn.fetch("SELECT seq, kind, data FROM events WHERE thread_id"
                                            " = $1 ORDER BY seq DESC LIMIT 3", t)
                    turns = await conn.fetch("SELECT status, stop_reason, owner FROM turns"
                                             " WHERE thread_id = $1", t)
                    print("  thread", t, stats["ended_by_thread"][str(t)],
                          [(r["seq"], r["kind"]) for r in rows],
                          [dict(r) for r in turns], file=sys.stderr)
            await conn.close()
        stream_s = time.monotonic() - t1
        # The org room's notices (every turn's end to every socket of the org) may still be
        # on their way: they are delivered in the background (realtime/managers.py).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stats["org_done"].wait(), timeout=60)
        org_drain_s = time.monotonic() - t1 - stream_s
        # Negative: the org room's notice came first.
        stats["org_lag"] = [(c.org_ended_at - c.ended_at) * 1000 for c in clients
                            if c.org_ended_at is not None and c.ended_at is not None]
        stats_after = [await asyncio.to_thread(_server_stats, p, data_dir / f"stats{i}.json")
                       for i, p in enumerate(procs)]
        if os.environ.get("BENCH_RAW"):
            Path(os.environ["BENCH_RAW"]).write_text(  # noqa: ASYNC240 (after the run)
                json.dumps(stats["raw"]))
        cpu_server = [_cpu_s(p.pid) - c for p, c in zip(procs, cpu_server, strict=True)]
        cpu_clients = time.process_time() - cpu_clients
        per_conn = [(a - b) / max(1, args.sockets // args.replicas)
                    for a, b in zip(rss_after, rss_before, strict=True)]
        frames = max(1, len(stats["last"]))
        spent = {k: sum(a[k] - b[k] for a, b in zip(stats_after, stats_before, strict=True))
                 for k in ("cpu_s", "json_encodes", "ws_sends")}
        return {
            "replicas": args.replicas, "sockets": args.sockets, "turns": args.turns,
            "tokens_per_turn": args.tokens, "token_interval_s": args.interval,
            "turn_starts_spread_s": args.stagger, "server_gc": args.server_gc or "ator default",
            "delta_frames_received": len(stats["last"]),
            "sockets_that_saw_turn_ended": stats["ended"],
            # Every socket gets every turn's end from the org room too: how many arrived, how
            # long after its own thread's turn_ended its own thread's notice came, and how long
            # after the last thread-room end the last notice came.
            "org_turn_ended_received": stats["org_ended"],
            "org_turn_ended_expected": stats["want_org_ended"],
            "org_notice_lag_ms": {"p50": round(_pct(stats["org_lag"], 50), 1),
                                  "p99": round(_pct(stats["org_lag"], 99), 1),
                                  "max": round(max(stats["org_lag"], default=float("nan")), 1)},
            "org_notices_drained_s_after_last_end": round(org_drain_s, 2),
            "disconnects_during_run": stats["disconnects"],
            "tokens_received": stats["tokens"],
            "tokens_expected": args.sockets * args.tokens,
            "latency_ms_last_token": {"p50": round(_pct(stats["last"], 50), 1),
                                      "p99": round(_pct(stats["last"], 99), 1),
                                      "max": round(max(stats["last"]), 1),
                                      "mean": round(statistics.fmean(stats["last"]), 1)},
            "latency_ms_first_token": {"p50": round(_pct(stats["first"], 50), 1),
                                       "p99": round(_pct(stats["first"], 99), 1)},
            "server_rss_kib_per_connection": [round(x, 1) for x in per_conn],
            "server_rss_mib_after": [round(x / 1024, 1) for x in rss_after],
            "connect_and_join_s": round(connect_s, 1), "stream_s": round(stream_s, 1),
            "cpu_share_while_streaming": {
                "servers": [round(c / stream_s, 2) for c in cpu_server],
                "clients": round(cpu_clients / stream_s, 2)},
            # Figures that do not depend on the machine's load (per delivered delta frame,
            # all servers, while streaming; the turns' own work is included).
            "server_cpu_us_per_delivered_frame": round(spent["cpu_s"] / frames * 1e6, 1),
            "server_json_encodes_per_delivered_frame": round(spent["json_encodes"] / frames, 3),
            "server_ws_sends_per_delivered_frame": round(spent["ws_sends"] / frames, 3),
            "server_loop_lag_ms": [a["loop_lag_ms"] for a in stats_after],
            "server_gc_pauses_ms": [a["gc_pauses_ms"] for a in stats_after],
        }
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
        if http is not None:
            await http.close()
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        conn = await asyncpg.connect(admin)
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sockets", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--stagger", type=float, default=1.0,
                        help="seconds over which the turns' first messages are spread")
    parser.add_argument("--server-gc", default="",
                        help="GC thresholds for the servers (ATOR_GC_THRESHOLDS), e.g. "
                             "'700,10,10', or 'python' for Python's own; default: ator's")
    parser.add_argument("--replicas", type=int, default=1, choices=(1, 2))
    parser.add_argument("--redis", default=os.environ.get("ATOR_TEST_REDIS_URL",
                                                          "redis://127.0.0.1:6379/15"))
    parser.add_argument("--burn", action="store_true",
                        help="run twice: idle, then beside a CPU-burning process")
    args = parser.parse_args()
    # The clients stand in for 1,000 browsers, each its own process; sharing this one, their
    # full collections would stall every client at once and be charged to the server.
    gc.freeze()
    gc.set_threshold(200_000, 100, 1000)
    missed = 0
    for burn in (False, True) if args.burn else (False,):
        result = _measured(args, burn)
        print(json.dumps(result, indent=2))
        RESULTS.parent.mkdir(exist_ok=True)
        key = (f"replicas_{args.replicas}" + (f"_gc_{args.server_gc}" if args.server_gc else "")
               + ("_burn" if burn else ""))
        saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        saved[key] = result
        RESULTS.write_text(json.dumps(saved, indent=2) + "\n")
        goal = GOAL_P99_BURN_MS if burn else GOAL_P99_MS
        p99 = result["latency_ms_last_token"]["p99"]
        print(f"{'beside a CPU burner' if burn else 'idle'}: p50 "
              f"{result['latency_ms_last_token']['p50']} ms, p99 {p99} ms (goal < {goal:g});"
              f" server {result['server_cpu_us_per_delivered_frame']} us CPU,"
              f" {result['server_json_encodes_per_delivered_frame']} JSON encodes per"
              f" delivered frame; load {result['load_average']}")
        if args.replicas == 1 and p99 >= goal:
            print(f"MISSED: p99 {p99} ms >= {goal:g} ms")
            missed = 1
    return missed


def _measured(args: argparse.Namespace, burn: bool) -> dict[str, Any]:
    """One session, beside a busy process when `burn`, with the load average around it."""
    load = _load()
    with cpu_burner(burn):
        result = asyncio.run(run(args))
    return {"beside_cpu_burner": burn, **result, "load_average": {"start": load,
                                                                   "end": _load()}}


if __name__ == "__main__":
    sys.exit(main())
