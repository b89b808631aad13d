"""Compaction end to end: the real `anthropic` SDK against the wire-level fake, real
PostgreSQL. A 60-iteration session with 32 KiB tool results behind a 100 KB transport limit
keeps answering; a "prompt is too long" compacts and retries once; a later turn starts from
the summary, not the whole thread."""

from __future__ import annotations

import asyncio
import json
import uuid
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa

from ator.agent.compaction import SUMMARY_SYSTEM
from ator.agent.history import build_messages
from ator.errors import ProviderError, ValidationFailed
from ator.providers.base import ModelRequest, Usage
from ator.providers.config import AnthropicConfig, OpenAIConfig, parse_provider_config
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.providers.size import request_bytes
from ator.store import turns as turn_store
from ator.store.events import HISTORY_KINDS
from ator.store.schema import events, model_calls
from ator.store.scope import Scope
from ator.testing import AnthropicWireFake, HttpError, RecordedRequest, Reply, ToolCall, WireUsage
from ator.tools.base import Tool, ToolContext
from tests.conftest import ended, new_thread, wait_for_event

LIMIT = 100_000
RESULT = 32 * 1024
MODEL = "claude-haiku-4-5"


async def _page(args: dict[str, Any], ctx: ToolContext) -> str:
    word = f"page{args['n']} "
    return (word * (RESULT // len(word) + 1))[:RESULT]


PAGE = Tool(name="fetch_page", description="Fetch page n.",
            input_schema={"type": "object", "properties": {"n": {"type": "integer"}},
                          "required": ["n"]},
            handler=_page)


def asks_summary(body: dict[str, Any]) -> bool:
    """A compaction call: asked in place (the ask is the last message's last block) or of a
    transcript (no tools)."""
    last = body["messages"][-1]["content"]
    text = last[-1].get("text", "") if isinstance(last, list) and last else str(last)
    return "tools" not in body or text.startswith(SUMMARY_SYSTEM)


def summary_call(request: ModelRequest) -> bool:
    """The same test for a scripted provider's request."""
    last = request.messages[-1]["content"]
    text = last[-1].get("text", "") if isinstance(last, list) and last else str(last)
    return not request.tools or str(text).startswith(SUMMARY_SYSTEM)


class Model:
    """The fake's model: a summary when asked for one, else `fetch_page` until
    `iterations` calls were made, then an answer. Reports the body size as input tokens."""

    def __init__(self, iterations: int) -> None:
        self.iterations = iterations
        self.calls = 0
        self.summaries = 0

    def __call__(self, request: RecordedRequest) -> Reply:
        usage = WireUsage(input_tokens=len(request.raw) // 4, output_tokens=40)
        if asks_summary(request.body):
            self.summaries += 1
            return Reply(text=f"Summary {self.summaries}: pages 1..{self.calls} fetched.",
                         usage=usage)
        if self.calls < self.iterations:
            self.calls += 1
            return Reply(tool_calls=[ToolCall("fetch_page", {"n": self.calls},
                                              id=f"toolu_{uuid.uuid4().hex[:12]}")],
                         usage=usage)
        return Reply(text=f"Read {self.calls} pages.", usage=usage)


def _paired(body: dict[str, Any]) -> bool:
    """Every tool_use answered in the next message, every tool_result answering the previous."""
    msgs = body["messages"]
    for i, m in enumerate(msgs):
        blocks = m["content"] if isinstance(m["content"], list) else []
        uses = {b["id"] for b in blocks if b.get("type") == "tool_use"}
        results = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
        if uses:
            nxt = msgs[i + 1]["content"] if i + 1 < len(msgs) else []
            if {b.get("tool_use_id") for b in nxt if b.get("type") == "tool_result"} != uses:
                return False
        if results:
            prev = msgs[i - 1]["content"] if i > 0 else []
            if {b.get("id") for b in prev if b.get("type") == "tool_use"} != results:
                return False
    return True


async def _thread(ator: Any, fake: AnthropicWireFake, **config: Any) -> tuple[Scope, Any]:
    scope = Scope((await ator.create_org(f"o-{uuid.uuid4().hex[:6]}")).id)
    await ator.put_secret(scope, "anthropic", "sk-ant-test")
    setup = await ator.create_setup(
        scope, name="s", provider="anthropic", model=MODEL,
        config={"api_key": "secret:anthropic", "base_url": fake.base_url,
                "caps": {"max_steps": 100, "tool_result_chars": 40_000,
                         "max_turn_tokens": 5_000_000}, **config})
    return scope, await ator.create_thread(scope, setup.id)


async def _rows(ator: Any, table: Any, thread_id: Any) -> list[Any]:
    return list(await ator.db.read(sa.select(table).where(table.c.thread_id == thread_id)))


async def test_sixty_iterations_of_32k_results_fit_a_100kb_transport(make_ator) -> None:
    model = Model(iterations=60)
    async with AnthropicWireFake(responder=model, max_body_bytes=LIMIT) as fake, \
            make_ator(tools=[PAGE], egress_allow="127.0.0.1") as ator:
        scope, thread = await _thread(ator, fake, body_limit=LIMIT)
        result = await ator.ask(scope, thread.id, "Read pages 1 to 60.", timeout=120)
        assert (result.text, result.status) == ("Read 60 pages.", "done"), result
        assert model.calls == 60 and model.summaries >= 10

        sizes = [len(r.raw) for r in fake.requests]
        assert max(sizes) <= LIMIT and fake.failures == []
        assert all(_paired(r.body) for r in fake.requests)
        # Without compaction the 61st call would have carried all 60 results.
        assert 60 * RESULT > 19 * LIMIT

        calls = await _rows(ator, model_calls, thread.id)
        compactions = [c for c in calls if c.purpose == "compaction"]
        assert len(compactions) == model.summaries
        assert all(c.priced and c.cost_usd > 0 and c.model == MODEL for c in compactions)
        summaries = [e for e in await _rows(ator, events, thread.id) if e.kind == "compaction"]
        assert len(summaries) == model.summaries
        assert all(e.data["bytes_after"] < e.data["bytes_before"] for e in summaries)
        # Billed to the turn: its cost is every call's, compaction calls included.
        turn = (await ator.turns(scope, thread.id))[0]
        assert turn.status == "done"
        assert turn.cost_usd == sum((c.cost_usd for c in calls), Decimal(0))
        # The call after a compaction says so, for the inspector.
        metas = [c.request_meta for c in calls if c.purpose == "step"]
        assert sum(1 for m in metas if "compaction" in m) == model.summaries
        # ... and caches up to the summary: the prompt-cache plan puts a breakpoint on it
        # (the wire body carries cache_control on the summary message's block).
        after = [m for m in metas if "compaction" in m]
        assert all(any(b.startswith("summary:") for b in m["breakpoints"]) for m in after)
        assert all(m["request_bytes"] <= LIMIT for m in metas)
        summary_marked = [r.body["messages"][0]["content"][-1].get("cache_control")
                          for r in fake.requests if "tools" in r.body  # a step, not a summary
                          and "Summary" in str(r.body["messages"][0]["content"][0])]
        assert summary_marked and all(summary_marked)

        # The next turn starts from the latest summary and what follows it.
        everything = [e for e in await _rows(ator, events, thread.id)
                      if e.kind in HISTORY_KINDS]
        start, started = await turn_store.start_turn(ator.db, scope, thread.id, uuid.uuid4(),
                                                     owner="probe")
        assert started == []  # nothing pending: a read, no turn
        assert len(start.history) < len(everything) // 10
        read_bytes = len(json.dumps([e["data"] for e in start.history]))
        assert read_bytes < len(json.dumps([e.data for e in everything])) // 10
        read = [e["seq"] for e in start.history if e["kind"] == "compaction"]
        assert read == [max(e.seq for e in summaries)]  # only the latest summary
        messages = build_messages(start.history)
        assert messages[0].get("summary") is True
        assert f"Summary {model.summaries}" in messages[0]["content"][0]["text"]

        fake.push(Reply(text="Sixty pages, all about pages."))
        before = len(fake.requests)
        answer = await ator.ask(scope, thread.id, "What did you find?", timeout=60)
        assert answer.text == "Sixty pages, all about pages."
        first = fake.requests[before].body["messages"]
        assert f"Summary {model.summaries}" in first[0]["content"][0]["text"]
        assert len(fake.requests[before].raw) <= LIMIT


async def test_the_summary_is_asked_in_place_so_the_prompt_cache_serves_it(make_ator) -> None:
    model = Model(iterations=12)
    async with AnthropicWireFake(responder=model, max_body_bytes=LIMIT,
                                 prompt_cache=True) as fake, \
            make_ator(tools=[PAGE], egress_allow="127.0.0.1") as ator:
        scope, thread = await _thread(ator, fake, body_limit=LIMIT)
        result = await ator.ask(scope, thread.id, "Read pages 1 to 12.", timeout=120)
        assert (result.text, result.status) == ("Read 12 pages.", "done"), result
        asked = [i for i, r in enumerate(fake.requests) if asks_summary(r.body)]
        assert asked and model.summaries == len(asked)
        for i in asked:
            ask, step = fake.requests[i].body, fake.requests[i - 1].body
            # The step's own system and tools, and its messages up to the cut, unchanged.
            assert (ask["system"], ask["tools"]) == (step["system"], step["tools"])
            *before, last = ask["messages"]
            n = len(before)
            assert _plain(before) == _plain(step["messages"][:n])
            assert _plain([{**last, "content": last["content"][:-1]}]) == \
                _plain([step["messages"][n]])
        calls = [c for c in await _rows(ator, model_calls, thread.id)
                 if c.purpose == "compaction"]
        # Served by the cache the previous step filled: nearly all of it read, not sent.
        assert calls and all(c.cache_read_tokens > 10 * (c.input_tokens + c.cache_write_tokens)
                             for c in calls), [(c.input_tokens, c.cache_read_tokens,
                                                c.cache_write_tokens) for c in calls]


def _plain(messages: list[dict[str, Any]]) -> list[Any]:
    """Messages without their cache breakpoints (which move from call to call)."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "cache_control"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return [strip(m) for m in messages]


async def test_prompt_too_long_compacts_and_retries_once(make_ator) -> None:
    model = Model(iterations=3)
    too_long = HttpError(400, "prompt is too long: 210000 tokens > 200000 maximum",
                         error_type="invalid_request_error")
    async with AnthropicWireFake(responder=model) as fake, \
            make_ator(tools=[PAGE], egress_allow="127.0.0.1") as ator:
        scope, thread = await _thread(ator, fake)
        await ator.ask(scope, thread.id, "Read three pages.", timeout=60)
        assert model.summaries == 0  # far under the limits: nothing to compact

        fake.push(too_long)
        answer = await ator.ask(scope, thread.id, "And a summary?", timeout=60)
        assert answer.text == "Read 3 pages."
        assert model.summaries == 1
        retried = fake.requests[-1].body["messages"]
        assert "Summary 1" in retried[0]["content"][0]["text"] and _paired(
            fake.requests[-1].body)
        calls = await _rows(ator, model_calls, thread.id)
        assert [c.purpose for c in calls].count("compaction") == 1
        assert calls[-1].request_meta["compaction"]["forced"] is True

        # A second refusal after the compaction ends the turn with its typed reason.
        fake.push(too_long, Reply(text="Summary again."), too_long)
        await ator.submit(scope, thread.id, "Once more?")
        end = await wait_for_event(ator, scope, thread.id,
                                   lambda e: ended(e) and e.data["status"] != "done")
        assert end.data["stop_reason"] == "error:context_overflow"
        assert "retried once" in end.data["error"]
        assert fake.remaining == 0


async def test_an_oversized_result_is_never_sent_whole(make_ator) -> None:
    async def dump(args: dict[str, Any], ctx: ToolContext) -> str:
        return "y" * 2_000_000

    provider = ScriptedProvider([ScriptStep(tool_calls=[("dump", {})]), ScriptStep(text="ok")])
    provider.record_requests = True
    tool = Tool(name="dump", description="A 2 MB result.",
                input_schema={"type": "object", "properties": {}}, handler=dump)
    async with make_ator(providers={"s": provider}, tools=[tool]) as ator:
        scope, thread = await new_thread(ator, "s", config={
            "body_limit": LIMIT, "caps": {"tool_result_chars": 1_000_000}})
        result = await ator.ask(scope, thread.id, "dump it", timeout=30)
        assert result.status == "done"
        sent = provider.requests[1]
        block = sent.messages[-1]["content"][0]
        assert block["type"] == "tool_result" and "cut by ator" in block["content"]
        assert request_bytes(sent) <= LIMIT * 0.8
        # The history keeps what the tool returned (cut only at the tool result cap).
        stored = [e for e in await _rows(ator, events, thread.id) if e.kind == "tool_results"]
        assert len(stored[0].data["results"][0]["content"]) == 1_000_000


def test_context_keys_of_a_setup_are_checked() -> None:
    for bad in ({"body_limit": 10}, {"context_window": "big"}, {"compaction_model": ""},
                {"context_window": True}):
        with pytest.raises(ValidationFailed) as err:
            parse_provider_config(AnthropicConfig, bad)
        assert err.value.code == "invalid_config"
    ok = parse_provider_config(OpenAIConfig, {"body_limit": 100_000, "context_window": 32_768,
                                          "compaction_model": "gpt-4o-mini"})
    assert ok.body_limit == 100_000


async def test_a_failed_compaction_call_ends_the_turn_with_its_typed_reason(make_ator) -> None:
    async def page(args: dict[str, Any], ctx: ToolContext) -> str:
        return "z" * 1500

    def respond(request: ModelRequest) -> ScriptStep:
        if summary_call(request):
            return ScriptStep(error=ProviderError("upstream broke", kind="server"))
        return ScriptStep(tool_calls=[("page", {})])

    provider = ScriptedProvider(responder=respond)
    tool = Tool(name="page", description="A page.",
                input_schema={"type": "object", "properties": {}}, handler=page)
    async with make_ator(providers={"s": provider}, tools=[tool]) as ator:
        # 1024 tokens x 4 bytes x 0.8: three 1.5 kB results do not fit.
        scope, thread = await new_thread(ator, "s", config={"context_window": 1024})
        result = await ator.ask(scope, thread.id, "read", timeout=30)
        assert (result.status, result.stop_reason) == ("error", "error:server")
        turn = await ator.turn(scope, result.turn_id)
        assert "the compaction call failed: upstream broke" in (turn.error or "")
        calls = await _rows(ator, model_calls, thread.id)
        assert {c.purpose for c in calls} == {"step"}  # nothing half-written
        assert not [e for e in await _rows(ator, events, thread.id) if e.kind == "compaction"]


async def test_a_summary_cut_short_by_a_stop_is_billed_and_not_taken_for_a_reply(
    make_ator,
) -> None:
    async def page(args: dict[str, Any], ctx: ToolContext) -> str:
        return "z" * 1500

    summarizing = asyncio.Event()

    def respond(request: ModelRequest) -> ScriptStep:
        if summary_call(request):  # streams a little, then hangs
            summarizing.set()
            return ScriptStep(text="partial summary", hang_after_text=True,
                              usage=Usage(input_tokens=700, output_tokens=0))
        return ScriptStep(tool_calls=[("page", {})])

    tool = Tool(name="page", description="A page.",
                input_schema={"type": "object", "properties": {}}, handler=page)
    async with make_ator(providers={"s": ScriptedProvider(responder=respond)},
                         tools=[tool]) as ator:
        scope, thread = await new_thread(ator, "s", config={"context_window": 1024})
        await ator.submit(scope, thread.id, "read")
        async with asyncio.timeout(30):
            await summarizing.wait()
        assert (await ator.stop(scope, thread.id)).running
        end = await wait_for_event(ator, scope, thread.id, ended)
        assert end.data["stop_reason"] == "cancelled:user"
        calls = await _rows(ator, model_calls, thread.id)
        cut = [c for c in calls if c.purpose == "compaction"]
        assert len(cut) == 1 and cut[0].input_tokens == 700 and cut[0].output_tokens > 0
        assert cut[0].usage_estimated and cut[0].request_meta["interrupted"] is True
        logged = await _rows(ator, events, thread.id)
        assert "partial summary" not in json.dumps([e.data for e in logged])
        assert not [e for e in logged if e.kind == "compaction"]
