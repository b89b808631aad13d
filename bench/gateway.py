"""The MCP gateway's added latency per `tools/call`, against calling the same upstream directly
(bench entry point; imports ator, mcp, httpx2, uvicorn and pgserver next to it).

A real MCP server (the `mcp` SDK's server side, on 127.0.0.1) offers `echo` (read-only). An
org registers it; `ator`'s app (the real one, `create_app`) is served by uvicorn on another
port. The same SDK client then calls `echo` directly on the upstream and through `/mcp`
(`<id8>__echo`), per era: `--calls` sequential calls (1,000) and `--concurrent` calls at once
(100) on one client. Reported: p50 and p99 of each, the gateway's added p50/p99, and how
many upstream sessions the gateway opened (the goal: one per downstream session, none per
call).

    ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/gateway.py [--calls 1000] [--concurrent 100]

Writes bench/results/gateway.json; exits 1 when the added p50 of the sequential calls is over
5 ms or an upstream session was opened per call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import tempfile
import time
import uuid
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

from ator import Ator, Scope, Settings
from ator.api.app import create_app
from ator.engine.mcp import McpServers, McpService
from ator.store import keys as key_store
from ator.store import orgs as org_store

RESULTS = Path(__file__).parent / "results" / "gateway.json"


def upstream() -> MCPServer:
    server = MCPServer("upstream")

    @server.tool(description="Echo the text back.",
                 annotations=ToolAnnotations(read_only_hint=True))
    def echo(text: str) -> str:
        return text

    return server


@asynccontextmanager
async def serve(app: Any) -> AsyncIterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="auto"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        await task
        sock.close()


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
        url = await pg.recreate("bench_gateway")
        settings = Settings(database_url=url, data_dir=Path(tempfile.mkdtemp()),
                            egress_allow=("127.0.0.1",), rate_limit_per_minute=0,
                            log_level="WARNING")
        ator = await Ator.open(settings)
        try:
            return await measure(ator, args)
        finally:
            await ator.close()
    finally:
        await pg.drop("bench_gateway")
        await pg.close()


async def measure(ator: Ator, args: argparse.Namespace) -> int:
    org = await ator.create_org(f"bench-{uuid.uuid4().hex[:6]}")
    scope = Scope(org.id)
    user = await org_store.create_user(ator.db, scope, "bench@x", "member")
    _, key = await key_store.create_key(ator.db, scope, user_id=user, name="b", role="member")
    report: dict[str, Any] = {"calls": args.calls, "concurrent": args.concurrent, "eras": {}}
    ok = True
    async with serve(upstream().streamable_http_app()) as up_port, \
            serve(create_app(ator.settings, runtime=ator)) as gw_port:
        up_url = f"http://127.0.0.1:{up_port}/mcp"
        made = await ator.service(McpServers).create_mcp_server(scope, name="up", url=up_url)
        name = f"{made.id.hex[:8]}__echo"
        pool = ator.service(McpService).pool
        for mode in ("auto", "legacy"):
            row: dict[str, Any] = {}
            for label, target, tool, token in (("direct", up_url, "echo", None),
                                               ("gateway", f"http://127.0.0.1:{gw_port}/mcp",
                                                name, key)):
                async with client(target, token, mode) as c:
                    async def call(c: Client = c, tool: str = tool) -> Any:
                        return await c.call_tool(tool, {"text": "hi"})

                    await timed(call, 20, False)  # warm-up
                    opened = pool.opened
                    row[label] = {
                        "sequential": quantiles(await timed(call, args.calls, False)),
                        "concurrent": quantiles(await timed(call, args.concurrent, True))}
                    if label == "gateway":
                        row["upstream_sessions_opened"] = pool.opened - opened
            for phase in ("sequential", "concurrent"):
                row[f"added_{phase}"] = {
                    q: round(row["gateway"][phase][q] - row["direct"][phase][q], 3)
                    for q in ("p50", "p99")}
            ok = ok and row["added_sequential"]["p50"] <= 5.0 \
                and row["upstream_sessions_opened"] == 0
            report["eras"][mode] = row
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0 if ok else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--concurrent", type=int, default=100)
    sys.exit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
