"""Tool search against mounting everything: 500 MCP tools, tool-definition tokens per step and
the steps a scripted task needs (bench entry point; imports ator, mcp, uvicorn and pgserver
next to it).

A real MCP server (the `mcp` SDK's server side, on 127.0.0.1) offers 500 tools. An org
registers it, `test_mcp_server` syncs its catalog, and a scripted model runs the same task in
two modes through the real engine: "all" (threshold above 500: every tool is mounted) and
"search" (threshold 40: `tool_search` is mounted, and what it finds from the next step on).
The task needs three specific tools. Tokens are the tool definitions each model request
carried, estimated with ator's one constant (`ator.usage.CHARS_PER_TOKEN`).

    ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/mcp_tool_search.py

Writes bench/results/mcp_tool_search.json; exits 1 when search mode's tokens per step exceed
10% of mounting all.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from pgserver import PgServer

from ator import Ator, Scope, Settings
from ator.engine.mcp import McpServers
from ator.providers.base import ModelRequest
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.usage import estimate_tokens

TOOLS = 500
VERBS = ["create", "list", "delete", "update", "get", "archive", "search", "export", "import",
         "assign"]
NOUNS = ["issue", "invoice", "calendar_event", "pull_request", "customer", "ticket",
         "spreadsheet_row", "email", "deployment", "user", "file", "channel_message", "order",
         "payment", "contract", "repository", "build", "alert", "document", "meeting",
         "subscription", "shipment", "lead", "report", "secret", "dashboard", "incident",
         "note", "task", "comment", "label", "webhook", "invoice_line", "refund", "coupon",
         "vendor", "employee", "timesheet", "expense", "budget", "forecast", "campaign",
         "segment", "survey", "release", "branch", "commit", "cluster", "volume", "backup"]
TARGETS = {"create_issue": "create an issue in the tracker",
           "export_invoice": "export an invoice",
           "assign_ticket": "assign a support ticket"}


def build_server() -> MCPServer:
    server = MCPServer("catalog")
    for i in range(TOOLS):
        verb, noun = VERBS[i % len(VERBS)], NOUNS[(i // len(VERBS)) % len(NOUNS)]
        name = f"{verb}_{noun}"
        words = noun.replace("_", " ")

        def make(tool: str) -> Any:
            def fn(target_id: str, note: str = "") -> str:
                return f"{tool} done for {target_id}"
            return fn

        server.add_tool(make(name), name=name, description=(
            f"{verb.title()} a {words}. Takes the {words} id and an optional note; returns "
            f"what was done. Part of the {words} service."))
    return server


def definition_tokens(request: ModelRequest) -> int:
    specs = [{"name": t.name, "description": t.description, "input_schema": t.input_schema}
             for t in request.tools]
    return estimate_tokens(len(json.dumps(specs)))


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def responder_for(mode: str) -> Any:
    def respond(request: ModelRequest) -> ScriptStep:
        tool_results = sum(1 for m in request.messages for b in _blocks(m)
                           if b.get("type") == "tool_result")
        offered = {t.name for t in request.tools}
        wanted = [f"catalog__{t}" for t in TARGETS]
        if mode == "search" and tool_results == 0:
            return ScriptStep(tool_calls=[("tool_search", {"query": q, "limit": 3})
                                          for q in TARGETS.values()])
        if not set(wanted) <= offered:
            return ScriptStep(text="cannot: tools missing")
        if tool_results < (6 if mode == "search" else 3):
            return ScriptStep(tool_calls=[(w, {"target_id": "42"}) for w in wanted])
        return ScriptStep(text="done")
    return respond


async def run_mode(mode: str, db_url: str, url: str, data_dir: Path) -> dict[str, Any]:
    provider = ScriptedProvider(responder=responder_for(mode))
    provider.record_requests = True
    threshold = 40 if mode == "search" else 10 * TOOLS
    settings = Settings(database_url=db_url, data_dir=data_dir, egress_allow=("127.0.0.1",),
                        mcp_tool_search_threshold=threshold, lease_ttl=5.0)
    async with await Ator.open(settings, providers={"scripted": provider}) as ator:
        org = await ator.create_org(f"bench-{mode}")
        scope = Scope(org.id)
        server = await ator.service(McpServers).create_mcp_server(scope, name="catalog", url=url)
        started = time.perf_counter()
        report = await ator.service(McpServers).test_mcp_server(scope, server.id)
        sync_s = time.perf_counter() - started
        assert report["ok"], report
        setup = await ator.create_setup(scope, name="s", provider="scripted", model="scripted")
        thread = await ator.create_thread(scope, setup.id)
        started = time.perf_counter()
        result = await ator.ask(scope, thread.id, "do the task", timeout=120)
        turn_s = time.perf_counter() - started
    per_step = [definition_tokens(r) for r in provider.requests]
    return {"mode": mode, "status": result.status, "answer": result.text,
            "steps": len(provider.requests), "tools_per_step": [len(r.tools)
                                                               for r in provider.requests],
            "definition_tokens_per_step": per_step, "definition_tokens_total": sum(per_step),
            "catalog_tools": report["tool_count"], "catalog_sync_s": round(sync_s, 3),
            "turn_s": round(turn_s, 3)}


async def main() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    web = uvicorn.Server(uvicorn.Config(build_server().streamable_http_app(),
                                        log_level="warning", timeout_graceful_shutdown=1))
    serving = asyncio.create_task(web.serve(sockets=[sock]))
    pg = await PgServer.start()
    results = []
    try:
        for mode in ("all", "search"):
            db_url = await pg.recreate(f"bench_mcp_{mode}")
            with tempfile.TemporaryDirectory() as tmp:
                results.append(await run_mode(mode, db_url, f"http://127.0.0.1:{port}/mcp",
                                              Path(tmp)))
            await pg.drop(f"bench_mcp_{mode}")
    finally:
        web.should_exit = True
        await serving
        await pg.close()
    every, search = results
    ratio = max(search["definition_tokens_per_step"]) / max(every["definition_tokens_per_step"])
    summary = {"tools": TOOLS, "results": results,
               "search_max_step_over_all_step": round(ratio, 4),
               "search_total_over_all_total": round(
                   search["definition_tokens_total"] / every["definition_tokens_total"], 4)}
    out = Path(__file__).parent / "results" / "mcp_tool_search.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    ok = ratio <= 0.10 and all(r["answer"] == "done" for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
