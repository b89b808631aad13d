"""The MCP gateway's added latency per `tools/call`, against calling the same upstream directly
(bench entry point; imports mcp, httpx2, uvicorn and pgserver next to it; runs `ator serve`).

Three processes, so that no two parties share an event loop (in one loop, a JSON response
waited ~40 ms more than across processes, which measured the loop, not the gateway): a real
MCP server (the `mcp` SDK's server side, on 127.0.0.1) offering `echo` (read-only) and
counting `initialize` requests (the upstream sessions opened); `ator serve` on a fresh
database; and this client. The operator's org registers the upstream over the HTTP API, then
the same SDK client calls `echo` directly and through `/mcp` (`<id8>__echo`), per era
(`auto`: 2026-07-28, `legacy`: handshake): `--calls` sequential calls (1,000) and
`--concurrent` calls at once (100) on one client, after 20 warm-up calls. Reported: p50 and
p99 of each, the gateway's added p50/p99, the CPU the answering process spent per
sequential call (the upstream's directly, `ator serve`'s through the gateway: a figure the
machine's other load does not inflate the way it does wall-clock latency), and the upstream
sessions opened while measuring (the goal: none; the warm-up opened the one this
downstream session uses). `--profile PREFIX` samples `ator serve` with py-spy meanwhile.

    ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/gateway.py [--calls 1000] [--concurrent 100]

Writes bench/results/gateway.json and ends with one line per era (added p50/p99, the
gateway/direct ratio, CPU per call) and the goal's verdict; exits 1 when the added p50 of
either era's sequential calls is over 5 ms or an upstream session was opened per call.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import uvicorn
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations
from pgserver import PgServer

RESULTS = Path(__file__).parent / "results" / "gateway.json"
_STARTUP = 240.0  # a loaded machine starts `ator serve` slowly
GOAL_MS = 5.0  # the goal: p50 added per `tools/call`, in each era


def upstream_app() -> Any:
    """`echo` over Streamable HTTP, and `GET /initialized`: how many sessions were opened."""
    server = MCPServer("upstream")
    opened = {"n": 0}

    @server.tool(description="Echo the text back.",
                 annotations=ToolAnnotations(read_only_hint=True))
    def echo(text: str) -> str:
        return text

    app = server.streamable_http_app()

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/initialized":
            body = str(opened["n"]).encode()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})
            return
        if scope["type"] == "http" and scope["method"] == "POST":
            messages, data = [], b""
            while True:
                m = await receive()
                messages.append(m)
                data += m.get("body", b"")
                if not m.get("more_body"):
                    break
            if b'"initialize"' in data:
                opened["n"] += 1

            async def replay() -> Any:
                return messages.pop(0) if messages else await receive()
            return await app(scope, replay, send)
        return await app(scope, receive, send)

    return counting


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_ready(url: str, proc: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + _STARTUP
    async with httpx2.AsyncClient(timeout=2) as http:
        while time.monotonic() < deadline:  # a process start: nothing to wait on but polls
            if proc.returncode is not None:
                raise RuntimeError(f"a bench process exited with {proc.returncode}")
            try:
                if (await http.get(url)).status_code < 500:
                    return
            except httpx2.TransportError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} was not ready after {_STARTUP} s")


@asynccontextmanager
async def process(args: list[str], env: dict[str, str], ready_url: str
                  ) -> AsyncIterator[asyncio.subprocess.Process]:
    with tempfile.TemporaryFile(prefix="bench-gateway-") as log:
        proc = await asyncio.create_subprocess_exec(*args, env=env, stdout=log,
                                                    stderr=subprocess.STDOUT)
        try:
            await wait_ready(ready_url, proc)
            yield proc
        finally:
            if proc.returncode is None:
                proc.terminate()
                try:
                    await asyncio.wait_for(proc.wait(), 15)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()


@asynccontextmanager
async def client(url: str, key: str | None, mode: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
            Client(streamable_http_client(url, http_client=http), mode=mode) as c:
        yield c


def quantiles(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {"p50": round(statistics.median(ms), 3),
            "p99": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 3)}


async def timed(call: Callable[[], Awaitable[Any]], n: int, concurrent: bool) -> list[float]:
    async def one() -> float:
        started = time.perf_counter()
        result = await call()
        if result.is_error:
            raise RuntimeError(f"a call failed: {result.content}")
        return (time.perf_counter() - started) * 1000

    if concurrent:
        return list(await asyncio.gather(*(one() for _ in range(n))))
    return [await one() for _ in range(n)]


async def run(args: argparse.Namespace) -> int:
    pg = await PgServer.start()
    try:
        db_url = await pg.recreate("bench_gateway")
        up_port, gw_port = free_port(), free_port()
        key = f"ator_{secrets.token_hex(4)}_{secrets.token_urlsafe(24)}"
        base = {k: v for k, v in os.environ.items() if not k.startswith("ATOR_")}
        env = {**base, "ATOR_DATABASE_URL": db_url, "ATOR_BOOTSTRAP_KEY": key,
               "ATOR_PORT": str(gw_port), "ATOR_EGRESS_ALLOW": "127.0.0.1",
               "ATOR_RATE_LIMIT_PER_MINUTE": "0", "ATOR_LOG_LEVEL": "WARNING",
               "ATOR_DATA_DIR": tempfile.mkdtemp(prefix="bench-gateway-"),
               "ATOR_MASTER_KEY": base64.b64encode(secrets.token_bytes(32)).decode()}
        up = [sys.executable, __file__, "--serve-upstream", str(up_port)]
        serve = [sys.executable, "-c", "from ator.cli.main import main; main()", "serve"]
        async with process(up, base, f"http://127.0.0.1:{up_port}/initialized") as up_proc, \
                process(serve, env, f"http://127.0.0.1:{gw_port}/readyz") as gw_proc:
            return await measure(args, f"http://127.0.0.1:{up_port}",
                                 f"http://127.0.0.1:{gw_port}", key,
                                 {"direct": up_proc.pid, "gateway": gw_proc.pid})
    finally:
        await pg.drop("bench_gateway")
        await pg.close()


def cpu_ms(pid: int) -> float:
    """User + system CPU the process has used so far, in ms (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


@asynccontextmanager
async def profiled(pid: int, out: str | None) -> AsyncIterator[None]:
    """py-spy sampling `pid` while the body runs (raw collapsed stacks in `out`)."""
    if out is None:
        yield
        return
    spy = await asyncio.create_subprocess_exec(
        "py-spy", "record", "--pid", str(pid), "--rate", "250", "--format", "raw",
        "--nonblocking", "-o", out, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        spy.send_signal(2)  # SIGINT: py-spy writes what it sampled
        await spy.wait()


async def measure(args: argparse.Namespace, up: str, gw: str, key: str,
                  pids: dict[str, int]) -> int:
    auth = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(timeout=30) as http:
        made = await http.post(f"{gw}/v1/mcp-servers", headers=auth,
                               json={"name": "up", "url": f"{up}/mcp"})
        made.raise_for_status()
        name = f"{made.json()['id'].replace('-', '')[:8]}__echo"

        async def initialized() -> int:
            return int((await http.get(f"{up}/initialized")).text)

        load = [round(x, 2) for x in os.getloadavg()]  # 1, 5, 15 minutes
        report: dict[str, Any] = {"calls": args.calls, "concurrent": args.concurrent,
                                  "eras": {}}
        ok = True
        for mode in ("auto", "legacy"):
            row: dict[str, Any] = {}
            for label, target, tool, token in (("direct", f"{up}/mcp", "echo", None),
                                               ("gateway", f"{gw}/mcp", name, key)):
                async with client(target, token, mode) as c:
                    async def call(c: Client = c, tool: str = tool) -> Any:
                        return await c.call_tool(tool, {"text": "hi"})

                    await timed(call, 20, False)  # warm-up
                    before = await initialized()
                    # CPU of the process that answers (the upstream, or `ator serve`): what
                    # the wall-clock figures measure too, but not the machine's other load.
                    cpu = cpu_ms(pids[label])
                    out = (f"{args.profile}-{mode}.txt"
                           if args.profile and label == "gateway" else None)
                    async with profiled(pids[label], out):
                        sequential = await timed(call, args.calls, False)
                    cpu_per_call = (cpu_ms(pids[label]) - cpu) / args.calls
                    cpu = cpu_ms(pids[label])
                    concurrent = await timed(call, args.concurrent, True)
                    cpu_concurrent = (cpu_ms(pids[label]) - cpu) / args.concurrent
                    row[label] = {
                        "sequential": quantiles(sequential),
                        "concurrent": quantiles(concurrent),
                        "cpu_ms_per_call": round(cpu_per_call, 3),
                        "cpu_ms_per_concurrent_call": round(cpu_concurrent, 3)}
                    if label == "gateway":
                        row["upstream_sessions_opened"] = await initialized() - before
            for phase in ("sequential", "concurrent"):
                row[f"added_{phase}"] = {
                    q: round(row["gateway"][phase][q] - row["direct"][phase][q], 3)
                    for q in ("p50", "p99")}
            # ator serve's own CPU per call: the gateway's work, whatever the machine's load
            row["gateway_cpu_ms_per_call"] = row["gateway"]["cpu_ms_per_call"]
            row["p50_ratio"] = round(row["gateway"]["sequential"]["p50"]
                                     / row["direct"]["sequential"]["p50"], 3)
            row["goal_met"] = (row["added_sequential"]["p50"] <= GOAL_MS
                               and row["upstream_sessions_opened"] == 0)
            ok = ok and row["goal_met"]
            report["eras"][mode] = row
    report["load_average"] = {"start": load, "end": [round(x, 2) for x in os.getloadavg()]}
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    for line in summary(report):
        print(line)
    return 0 if ok else 1


def summary(report: dict[str, Any]) -> list[str]:
    """One line per era and the goal's verdict, from this run's figures."""
    names = {"auto": "2026-07-28", "legacy": "handshake "}
    load = report["load_average"]
    lines = [f"load average (1, 5, 15 min) at start {load['start']}, at end {load['end']}"]
    for mode, row in report["eras"].items():
        s, c = row["added_sequential"], row["added_concurrent"]
        lines.append(
            f"{names[mode]}: added p50/p99 sequential {s['p50']:.1f}/{s['p99']:.1f} ms, "
            f"concurrent {c['p50']:.1f}/{c['p99']:.1f} ms; gateway/direct p50 "
            f"{row['p50_ratio']:.2f}x; ator serve CPU {row['gateway_cpu_ms_per_call']:.2f} "
            f"ms/call (upstream directly {row['direct']['cpu_ms_per_call']:.2f}); upstream "
            f"sessions opened {row['upstream_sessions_opened']}")
    met = all(row["goal_met"] for row in report["eras"].values())
    lines.append(f"goal (sequential p50 added <= {GOAL_MS:g} ms in both eras, no upstream "
                 f"session per call): {'MET' if met else 'NOT MET'}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--concurrent", type=int, default=100)
    parser.add_argument("--profile", metavar="PREFIX", help="py-spy `ator serve` during the "
                        "gateway's sequential calls: PREFIX-<era>.txt (raw stacks)")
    parser.add_argument("--serve-upstream", type=int, metavar="PORT",
                        help=argparse.SUPPRESS)  # the upstream process of a run
    args = parser.parse_args()
    if args.serve_upstream:
        uvicorn.run(upstream_app(), host="127.0.0.1", port=args.serve_upstream,
                    log_level="warning")
        return
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
