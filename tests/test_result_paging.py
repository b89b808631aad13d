"""A tool result longer than the turn's cap, seen from outside: a real MCP server on loopback
returns 200 KiB, a model pages it with `read_tool_result` until the last page, and what the
model read, joined, is exactly what the server returned (issue 17, D1). The budget's own
rules (a marker, pointer or header is never cut; a page fits the cap with its header) are
checked at every cap size, down to caps too small to page."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ator import Scope
from ator.engine.mcp import McpServers
from ator.providers.base import ModelRequest
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.tools.results import ResultBudget
from tests.conftest import new_thread
from tests.mcp_servers import demo_server, serve_mcp

BIG = 200 * 1024
_POINTER = re.compile(r'read_tool_result\(id="([0-9a-f-]{36})", page=(\d+)\)')
_WRAPPED = re.compile(r'\A<untrusted-data source="[^"]*">\n(.*)\n</untrusted-data>\n\(The',
                      re.DOTALL)
_HEADER = re.compile(r"\A\[stored result [0-9a-f-]{36}: page (\d+) of (\d+)\.[^\n]*\]\n")
_CUT = re.compile(r"\n\[result cut: showing \d+ of \d+ characters;[^\n]*\]\Z")


def _results(request: ModelRequest) -> list[str]:
    return [b["content"] for m in request.messages if isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"]


def pager() -> ScriptedProvider:
    """A model that calls docs__big, then follows every pointer to the next page."""

    def respond(request: ModelRequest) -> ScriptStep:
        seen = _results(request)
        if not seen:
            return ScriptStep(tool_calls=[("docs__big", {})])
        found = _POINTER.findall(seen[-1])
        if not found:
            return ScriptStep(text="read it all")
        ref, page = found[-1]
        return ScriptStep(tool_calls=[("read_tool_result", {"id": ref, "page": int(page)})])

    provider = ScriptedProvider(responder=respond)
    provider.record_requests = True
    return provider


def recovered(contents: list[str]) -> str:
    """The pages the model read, unwrapped and without their header or pointer."""
    out = []
    for n, content in enumerate(contents, start=1):
        wrapped = _WRAPPED.match(content)
        assert wrapped, content[:200]
        text = wrapped.group(1)
        if n == 1:
            assert _CUT.search(text), text[-300:]
            text = _CUT.sub("", text)
        else:
            header = _HEADER.match(text)
            assert header and int(header.group(1)) == n, text[:200]
            text = text[header.end():]
        out.append(text)
    return "".join(out)


@pytest.mark.parametrize("cap", [None, 5_000], ids=["default-caps", "cap-below-a-page"])
async def test_a_200_kib_mcp_result_is_paged_to_the_end_and_every_byte_recovered(
        make_ator: Any, cap: int | None) -> None:
    provider = pager()
    caps: dict[str, Any] = {"max_steps": 100}
    if cap is not None:
        caps["tool_result_chars"] = cap
    async with serve_mcp(demo_server(big_chars=BIG)) as url, \
            make_ator(providers={"s": provider}, egress_allow=("127.0.0.1",)) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": caps})
        await ator.service(McpServers).create_mcp_server(Scope(scope.org_id), name="docs",
                                                         url=url)
        result = await ator.ask(scope, thread.id, "read the big result", timeout=120)
        assert result.stop_reason == "end_turn"
        contents = _results(provider.requests[-1])
        limit = cap or 20_000
        # Every result the model read fit the cap, framing included.
        assert all(len(_WRAPPED.match(c).group(1)) <= limit for c in contents)  # type: ignore[union-attr]
        header = _HEADER.match(_WRAPPED.match(contents[-1]).group(1))  # type: ignore[union-attr]
        assert header and header.group(1) == header.group(2) == str(len(contents))
        assert "This is the last page." in contents[-1]
        expected = "".join(f"{i:07d}\n" for i in range(BIG // 8))
        assert recovered(contents) == expected


@pytest.mark.parametrize("limit", [1, 10, 40, 100, 299, 300, 301, 1_000, 20_000])
def test_the_budget_never_cuts_its_own_marker_pointer_or_header(limit: int) -> None:
    budget = ResultBudget(limit)
    text = "".join(f"{i:05d}" for i in range(10_000))  # 50,000 characters
    cut = budget.cut(text)
    assert len(cut) <= limit and text.startswith(cut.split("\n[truncated")[0])
    if "[truncated" in cut:
        kept = int(re.search(r"showing (\d+) of 50000", cut).group(1))  # type: ignore[union-attr]
        assert cut == text[:kept] + f"\n[truncated: showing {kept} of 50000 characters]"
    if not budget.page_chars:
        return
    ref = "0123abcd-0000-4000-8000-000000000000"
    first = budget.first_page(text, ref)
    assert len(first) <= limit and f'read_tool_result(id="{ref}", page=2)' in first
    pages = budget.pages(len(text))
    joined = first[:budget.page_chars]
    for n in range(2, pages + 1):
        page = budget.page(text, ref, n)
        assert len(page) <= limit
        joined += page.partition("\n")[2]
    assert joined == text
