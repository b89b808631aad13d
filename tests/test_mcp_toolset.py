"""The per-turn MCP toolset against real servers on loopback: `server__tool` names and
origins, capped descriptions, server globs, collisions refused, a hanging or dead server never
blocking the others, and a 200 KB result stored whole and paged by `read_tool_result`."""

from __future__ import annotations

import asyncio
import re
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ator.engine.mcp import McpServers, McpService
from ator.errors import NotFound
from ator.mcp.client import McpEndpoint, RemoteTool
from ator.mcp.pool import McpPool
from ator.mcp.toolset import McpToolset, MountedServer
from ator.tools.base import Tool, ToolCall, ToolContext, ToolResult
from ator.tools.policy import parse_tool_policy
from ator.tools.registry import ToolRegistry
from ator.tools.results import StoredResults, read_tool_result
from ator.tools.toolset import ToolScope, TurnTools
from tests.mcp_servers import ServerState, demo_server, serve_mcp
from tests.test_mcp_client import loopback_egress


class Catalog:
    def __init__(self, servers: list[MountedServer]) -> None:
        self.servers = servers

    async def mounted(self, org_id: uuid.UUID) -> list[MountedServer]:
        return self.servers


def scope(root: uuid.UUID | None = None) -> ToolScope:
    return ToolScope(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), root, 1)


def ctx(s: ToolScope, services: dict[type, object] | None = None) -> ToolContext:
    return ToolContext(s.org_id, s.thread_id, s.turn_id, "call-1", services=services or {})


def server(name: str, url: str | None, *, timeout: float = 10.0, tools: Any = None,
           allow: list[str] | None = None, deny: tuple[str, ...] = ()) -> MountedServer:
    return MountedServer(uuid.uuid4(), McpEndpoint(name, "http", url, timeout=timeout),
                         tools, allow, deny)


async def run(tool: Tool, args: dict[str, Any], c: ToolContext) -> ToolResult:
    out = await tool.handler(args, c)
    assert isinstance(out, ToolResult)
    return out


async def test_tools_are_namespaced_labelled_capped_and_filtered_by_globs() -> None:
    pool = McpPool(loopback_egress())
    async with serve_mcp(demo_server(long_description=10_000)) as url:
        try:
            ts = McpToolset(Catalog([server("docs", url, deny=("hang", "docs__big"))]), pool,
                            description_chars=500, companions=(read_tool_result,))
            s = scope()
            tools = {t.name: t for t in await ts.tools(s)}
            assert set(tools) == {"docs__echo", "docs__write", "docs__verbose",
                                  "read_tool_result"}
            echo = tools["docs__echo"]
            assert (echo.origin, echo.untrusted, echo.read_only) == ("mcp:docs", True, True)
            assert echo.description.startswith("[mcp:docs] Echo")
            assert len(tools["docs__verbose"].description) <= 500
            assert tools["docs__verbose"].description.endswith("[description cut]")
            assert await ts.tools(s) is await ts.tools(s)  # one catalog read per turn
            result = await run(echo, {"text": "x"}, ctx(s))
            assert (result.text, result.untrusted, result.is_error) == ("echo: x", True, False)
        finally:
            await pool.aclose()


async def test_colliding_names_refuse_the_later_tool_with_a_clear_error() -> None:
    a = RemoteTool("do.it", "first", {"type": "object"}, False)
    b = RemoteTool("do_it", "second", {"type": "object", "properties": {"x": {}}}, False)
    ts = McpToolset(Catalog([server("srv", "https://unused.example/mcp", tools=[a, b])]),
                    McpPool(None))
    s = scope()
    tools = await ts.tools(s)
    assert [t.description for t in tools] == ["[mcp:srv] first"]
    assert any("srv__do_it" in p and "another tool already has that name" in p
               for p in ts.problems[s.turn_id])


async def test_a_hanging_server_times_out_while_the_other_servers_tools_work() -> None:
    slow_state = ServerState()
    pool = McpPool(loopback_egress())
    async with serve_mcp(demo_server("slow", state=slow_state)) as slow_url, \
            serve_mcp(demo_server("fast")) as fast_url:
        try:
            ts = McpToolset(Catalog([server("slow", slow_url, timeout=1.0),
                                     server("fast", fast_url),
                                     server("dead", "http://127.0.0.1:9/mcp", timeout=2)]),
                            pool)
            s = scope()
            tools = {t.name: t for t in await ts.tools(s)}
            assert "slow__hang" in tools and "fast__echo" in tools
            assert not any(n.startswith("dead__") for n in tools)
            assert any("'dead' left out: [mcp_server_unavailable]" in p
                       for p in ts.problems[s.turn_id])
            hung, fast = await asyncio.gather(run(tools["slow__hang"], {}, ctx(s)),
                                              run(tools["fast__echo"], {"text": "ok"}, ctx(s)))
            assert hung.is_error and hung.text.startswith("mcp_timeout: ")
            assert hung.meta["code"] == "mcp_timeout" and hung.untrusted is False
            assert (fast.text, fast.is_error) == ("echo: ok", False)
            # A failed call does not evict a healthy session: the next call reuses it.
            opened = pool.opened
            again = await run(tools["slow__echo"], {"text": "still"}, ctx(s))
            assert again.text == "echo: still" and pool.opened == opened
        finally:
            slow_state.release.set()
            await pool.aclose()


async def test_read_tool_result_pages_through_all_of_a_200_kb_result(make_ator: Any) -> None:
    """The toolset hands the result over whole; the registry, the one cutter, stores and
    pages it under the turn's cap (tests/test_result_paging.py runs it in a turn)."""
    pool = McpPool(loopback_egress())
    async with make_ator(engine=False) as ator, serve_mcp(demo_server()) as url:
        try:
            org = await ator.create_org("paging")
            results = StoredResults(ator.db)
            ts = McpToolset(Catalog([server("docs", url)]), pool,
                            companions=(read_tool_result,))
            s = ToolScope(org.id, uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), None, 1)
            mounted = {t.name: t for t in await ts.tools(s)}
            registry = ToolRegistry(mounted.values())
            c = ctx(s, {StoredResults: results})
            expected = "".join(f"{i:07d}\n" for i in range(200_000 // 8))
            whole = (await run(mounted["docs__big"], {}, c)).text
            assert whole == expected
            [first] = await registry.run_all([ToolCall("t1", "docs__big", {})], lambda _: c,
                                             default_timeout=10, result_limit=20_000)
            assert first.truncated_from == 200_000 and len(first.content) <= 20_000
            ref = re.search(r'read_tool_result\(id="([^"]+)", page=2\)', first.content)
            assert ref, first.content[-300:]
            text = await read_tool_result.handler({"id": ref.group(1), "page": 11},
                                                  replace(c, result_chars=20_000))
            assert re.search(r"page 11 of 11\. This is the last page", text)
            # Another org cannot read it.
            other = ToolContext(uuid.uuid4(), s.thread_id, s.turn_id, "c",
                                services={StoredResults: results})
            with pytest.raises(NotFound):
                await read_tool_result.handler({"id": ref.group(1), "page": 1}, other)
        finally:
            await pool.aclose()


def catalog(n: int) -> list[RemoteTool]:
    verbs = ["create", "list", "delete", "update", "get", "archive", "search", "export"]
    nouns = ["issue", "invoice", "calendar_event", "pull_request", "customer", "ticket",
             "spreadsheet_row", "email", "deployment", "user", "file", "channel_message",
             "order"]
    out = []
    for i in range(n):
        verb, noun = verbs[i % len(verbs)], nouns[(i // len(verbs)) % len(nouns)]
        out.append(RemoteTool(f"{verb}_{noun}_{i}", f"{verb.title()} a {noun.replace('_', ' ')}"
                              f" in system {i}.", {"type": "object", "properties": {
                                  f"{noun}_id": {"type": "string"}}}, verb in ("list", "get")))
    return out


async def test_above_the_threshold_tool_search_finds_tools_callable_from_the_next_step() -> None:
    tools = catalog(100)
    ts = McpToolset(Catalog([server("big", "https://unused.example/mcp", tools=tools)]),
                    McpPool(None), search_threshold=40, companions=(read_tool_result,))
    s = scope()
    first = await ts.tools(s)
    assert [t.name for t in first] == ["tool_search", "read_tool_result"]
    search = first[0]
    found = await search.handler({"query": "delete an invoice"}, ctx(s))
    assert "big__delete_invoice_" in found.splitlines()[1]
    second = await ts.tools(s)
    assert second is not first
    names = [t.name for t in second]
    assert names[0] == "tool_search" and any(n.startswith("big__delete_invoice_")
                                             for n in names)
    assert len(names) <= 2 + 5
    # Found tools are mounted on demand (the inspector shows it) and appended, so the tools
    # already sent keep their place in the request.
    assert [t.on_demand for t in second] == [False] + [True] * (len(names) - 2) + [False]
    assert [t.spec().on_demand for t in second][1] is True
    assert await ts.tools(s) is second  # unchanged until another search adds something
    other_turn = await ts.tools(scope())
    assert [t.name for t in other_turn] == ["tool_search", "read_tool_result"]


async def test_at_or_below_the_threshold_every_tool_is_mounted() -> None:
    ts = McpToolset(Catalog([server("small", "https://unused.example/mcp",
                                    tools=catalog(40))]), McpPool(None), search_threshold=40)
    assert len(await ts.tools(scope())) == 40


async def test_operator_stdio_servers_are_offered_to_every_org(make_ator: Any) -> None:
    script = str(Path(__file__).with_name("mcp_stdio_server.py"))
    async with make_ator(engine=False,
                         mcp_stdio_servers={"local": [sys.executable, script]}) as ator:
        org = await ator.create_org("stdio")
        s = ToolScope(org.id, uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), None, 1)
        tools = {t.name: t for t in await ator.service(McpService).toolset.tools(s)}
        assert tools["local__add"].origin == "mcp:local"
        result = await run(tools["local__add"], {"a": 20, "b": 22}, ctx(s))
        assert (result.text, result.untrusted) == ("42", True)


async def test_an_oversized_schema_is_not_mounted_and_says_why() -> None:
    huge = {"type": "object", "properties": {f"p{i}": {"type": "string",
                                                      "description": "d" * 100}
                                             for i in range(200)}}
    ts = McpToolset(Catalog([server("srv", "https://unused.example/mcp", tools=[
        RemoteTool("huge", "", huge, False), RemoteTool("small", "", {"type": "object"}, False)
    ])]), McpPool(None))
    s = scope()
    assert [t.name for t in await ts.tools(s)] == ["srv__small"]
    assert any("'srv__huge' was not mounted: its input schema is over" in p
               for p in ts.problems[s.turn_id])


async def test_the_setup_policy_allows_and_denies_by_server_and_glob() -> None:
    tools = [RemoteTool(n, "", {"type": "object"}, False) for n in ("read", "write", "drop")]
    mcp = McpToolset(Catalog([server("docs", "https://u.example/mcp", tools=tools),
                              server("crm", "https://u.example/mcp", tools=tools)]),
                     McpPool(None))
    turn = TurnTools([mcp], allow=["docs__*", "crm__read"], deny=["docs__dr?p"],
                     description_limit=1000)
    registry = await turn.refresh(scope())
    assert sorted(registry.names()) == ["crm__read", "docs__read", "docs__write"]
    assert parse_tool_policy({"allow": ["docs__*"], "deny": ["docs__[dw]*"]})


async def test_a_server_left_out_is_told_to_the_model_before_its_first_call(
    make_ator: Any,
) -> None:
    from ator.agent.loop import ModelRequest as Request
    from ator.providers.base import MessageStop, StreamEvent, TextDelta, Usage
    from ator.store.schema import model_calls
    from tests.conftest import new_thread

    seen: list[Request] = []

    class Recorder:
        name = "rec"

        async def stream(self, request: Request) -> Any:
            seen.append(request)
            events: list[StreamEvent] = [TextDelta("ok"), MessageStop("end_turn", Usage(1, 1))]
            for event in events:
                yield event

    async with make_ator(providers={"rec": Recorder()}, egress_allow=("127.0.0.1",),
                         mcp_catalog_ttl=0.001) as ator:
        scope, thread = await new_thread(ator, "rec")
        await ator.service(McpServers).create_mcp_server(scope, name="dead", transport="http",
                                     url="http://127.0.0.1:9/mcp", timeout_s=2)
        result = await ator.ask(scope, thread.id, "hi", timeout=30)
        [row] = await ator.db.read(sa.select(model_calls.c.request_meta)
                                   .where(model_calls.c.turn_id == result.turn_id))
    assert result.stop_reason == "end_turn"
    status = [b for b in seen[0].system if b.name == "mcp-status"]
    assert status and "'dead' left out: [mcp_server_unavailable]" in status[0].text
    assert any("mcp_server_unavailable" in p for p in row.request_meta["mcp_problems"])
