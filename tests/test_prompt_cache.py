"""Prompt layers and prompt caching by design: the layer order and `replace`, one breakpoint
plan (system, tools, the compaction summary, the latest user message) sent by the Anthropic
adapter, and the wire fake's simulated prompt cache (real SDK, real HTTP)."""

from __future__ import annotations

import uuid
from typing import Any

from ator.agent.caps import Caps
from ator.agent.inspection import describe, diff
from ator.agent.state import TurnContext
from ator.agent.system_prompt import (
    CORE_PROMPT,
    CORE_VERSION,
    DATA_RULE,
    build_system,
    prompt_layers,
)
from ator.providers.anthropic import AnthropicProvider, build_params
from ator.providers.base import ModelRequest, SystemBlock, ToolSpec
from ator.providers.breakpoints import Breakpoint, plan_breakpoints
from ator.testing.anthropic_wire import AnthropicWireFake
from ator.testing.wire import Reply


def _turn(**kw: Any) -> TurnContext:
    ids = [uuid.uuid4() for _ in range(4)]
    base: dict[str, Any] = {"org_id": ids[0], "thread_id": ids[1], "turn_id": ids[2],
                            "setup_id": ids[3], "root_id": None, "depth": 0,
                            "provider": "p", "model": "m", "persona": "You are Ada.",
                            "instructions": "Be brief.", "caps": Caps()}
    return TurnContext(**{**base, **kw})


def _user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], **extra}


def test_layers_come_in_a_fixed_order_with_versions() -> None:
    turn = _turn(policy="Org rule.", policy_version=3, persona_version=2,
                 instructions_version=5)
    tools = [ToolSpec("calc", "Adds.\nMore.", {"type": "object"})]
    blocks, meta = build_system(prompt_layers(turn), tools)
    assert [m["name"] for m in meta] == ["core", "org_policy", "persona", "thread", "tools"]
    assert [m["version"] for m in meta] == [CORE_VERSION, 3, 2, 5, None]
    assert blocks[1].text == "## org_policy\nOrg rule."
    assert blocks[-1].text == "## tools\nYour tools:\n- calc: Adds."
    assert [b.cache for b in blocks] == [False, False, False, False, True]
    assert "replace" not in str(meta)


def test_a_replacing_policy_stands_for_core_but_keeps_the_data_rule() -> None:
    layers = prompt_layers(_turn(policy="Only French.", policy_replace=True))
    core, policy = layers[0], layers[1]
    assert core.text == DATA_RULE and CORE_PROMPT != DATA_RULE
    assert policy.meta["replace"] is True
    # An empty policy replaces nothing.
    assert prompt_layers(_turn(policy=" ", policy_replace=True))[0].text == CORE_PROMPT


def test_breakpoints_by_priority_with_a_compaction_summary() -> None:
    messages = [_user("summary of earlier", summary=True),
                {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                _user("latest")]
    plan = plan_breakpoints([False, True, False, True], 3, messages)
    assert plan == [Breakpoint("system", 3), Breakpoint("tools", 2),
                    Breakpoint("summary", 0), Breakpoint("user", 2)]
    # The summary being the latest user message is one breakpoint, not two.
    assert [p.part for p in plan_breakpoints([True], 0, messages[:1])] == ["system", "user"]


def test_the_adapter_places_the_summary_breakpoint_and_drops_the_marker() -> None:
    request = ModelRequest(
        model="m",
        system=[SystemBlock("a", cache=True), SystemBlock("b", cache=True)],
        tools=[ToolSpec("t", "d", {"type": "object"})],
        messages=[_user("the summary", summary=True),
                  {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                  _user("now")],
    )
    params = build_params(request)
    assert all(set(m) == {"role", "content"} for m in params["messages"])
    marked = [b for m in params["messages"] for b in m["content"] if "cache_control" in b]
    assert [b["text"] for b in marked] == ["the summary", "now"]
    # Four in all: the earlier flagged system block lost to the summary.
    assert "cache_control" not in params["system"][0]
    assert "cache_control" in params["system"][1] and "cache_control" in params["tools"][0]


def test_the_diff_names_changed_parts_in_prefix_order() -> None:
    def request(policy: str, tools: list[ToolSpec], messages: list[Any]) -> dict[str, Any]:
        blocks, meta = build_system(prompt_layers(_turn(policy=policy)), tools)
        return describe(ModelRequest(model="m", messages=messages, system=blocks,
                                     tools=tools), meta)

    calc = ToolSpec("calc", "Adds.", {"type": "object"})
    search = ToolSpec("search", "Finds.", {"type": "object"}, on_demand=True)
    one = request("p1", [calc], [_user("a")])
    grown = request("p1", [calc], [_user("a"), _user("b")])
    assert diff(one, grown) == {"cache_broken_by": [], "changed": []}
    both = request("p2", [calc, search], [_user("b")])
    assert diff(one, both)["cache_broken_by"] == [
        "tool:search", "layer:org_policy", "layer:tools", "messages"]
    assert [t["on_demand"] for t in both["tools"]] == [False, True]


async def test_the_fake_simulates_the_prompt_cache_through_the_sdk() -> None:
    system = [SystemBlock("s" * 4000, cache=True)]
    tools = [ToolSpec("t", "d" * 2000, {"type": "object"})]

    def request(*texts: str, system: list[SystemBlock] = system) -> ModelRequest:
        return ModelRequest(model="m", system=system, tools=tools,
                            messages=[_user(t) for t in texts])

    async with AnthropicWireFake([Reply(text="x")] * 4, prompt_cache=True) as fake, \
            AnthropicProvider(api_key="k", base_url=fake.base_url) as provider:
        usages = []
        for req in (request("q" * 800), request("q" * 800, "r" * 40), request("z"),
                    request("z", system=[SystemBlock("other", cache=True)])):
            events = [e async for e in provider.stream(req)]
            usages.append(events[-1].usage)  # type: ignore[attr-defined]
    first, second, third, fourth = usages
    assert first.cache_read_tokens == 0 and first.cache_write_tokens > 1500
    # The second call reads the first one's whole prefix and writes only its new message.
    assert second.cache_read_tokens == first.cache_write_tokens
    assert 0 < second.cache_write_tokens < 100
    # Another conversation on the same tools and system reads those, not the messages.
    assert 1500 < third.cache_read_tokens < first.cache_write_tokens
    # A changed system prompt still reads the tools, which come first.
    assert 0 < fourth.cache_read_tokens < 1000


async def test_a_wide_step_marks_the_previous_user_message_again() -> None:
    """25 tool calls in one step put the previous call's breakpoint beyond the API's
    20-block lookback: without marking it again the next call reads nothing of the
    conversation (bench/prompt_cache.py measures the session)."""
    calls = [{"type": "tool_use", "id": f"t{j}", "name": "t", "input": {}} for j in range(25)]
    results = [{"type": "tool_result", "tool_use_id": f"t{j}", "content": "r" * 400}
               for j in range(25)]
    before = [_user("summary " * 300, summary=True), _user("go " * 300)]
    after = [*before, {"role": "assistant", "content": calls},
             {"role": "user", "content": results}]
    plan = plan_breakpoints([True], 1, after)
    assert [p.label for p in plan] == ["system:0", "tools:0", "previous_user:1", "user:3"]
    tools = [ToolSpec("t", "d", {"type": "object"})]
    system = [SystemBlock("s" * 400, cache=True)]
    async with AnthropicWireFake([Reply(text="x")] * 2, prompt_cache=True) as fake, \
            AnthropicProvider(api_key="k", base_url=fake.base_url) as provider:
        usages = []
        for messages in (before, after):
            req = ModelRequest(model="m", system=system, tools=tools, messages=messages)
            usages.append([e async for e in provider.stream(req)][-1].usage)  # type: ignore[attr-defined]
    assert usages[1].cache_read_tokens == usages[0].cache_write_tokens
