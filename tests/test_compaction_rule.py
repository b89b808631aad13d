"""The transport-aware compaction rule as pure functions, the window table, the per-turn
limits from settings and setup, and the summary marker adapters must not send."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from ator.agent.compaction import (
    ContextLimits,
    choose_cut,
    clip_items,
    cut_points,
    message_bytes,
    render_transcript,
)
from ator.agent.history import build_messages, summary_message
from ator.agent.windows import DEFAULT_WINDOW, LOCAL_WINDOW, context_window
from ator.cli.render import TurnView
from ator.engine.context_policy import ContextPolicy
from ator.providers import anthropic, local, openai
from ator.providers.base import ModelRequest
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.usage import CHARS_PER_TOKEN


def _iteration(n: int, seq: int, size: int = 10) -> list[dict]:
    return [
        {"role": "assistant", "seq": seq, "content": [
            {"type": "tool_use", "id": f"t{n}", "name": "fetch", "input": {"n": n}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"t{n}", "content": "x" * size,
             "is_error": False}]},
    ]


def _conversation(iterations: int, size: int = 10) -> list[dict]:
    msgs: list[dict] = [{"role": "user", "content": [{"type": "text", "text": "go"}]}]
    for n in range(iterations):
        msgs += _iteration(n, seq=3 + 2 * n, size=size)
    return msgs


def test_the_cut_falls_only_before_a_persisted_assistant_message() -> None:
    msgs = _conversation(3)
    assert cut_points(msgs) == [1, 3, 5]
    msgs[3].pop("seq")  # not persisted yet: no cut there
    assert cut_points(msgs) == [1, 5]
    # Every tail starts with an assistant message, and every tool_use keeps its result.
    for i in cut_points(msgs):
        head, tail = msgs[:i], msgs[i:]
        assert head[-1]["role"] == "user" and tail[0]["role"] == "assistant"
        used = {b["id"] for m in head for b in m["content"] if b["type"] == "tool_use"}
        answered = {b["tool_use_id"] for m in head for b in m["content"]
                    if b["type"] == "tool_result"}
        assert used == answered


def test_choose_cut_keeps_as_much_as_fits_else_the_smallest_tail() -> None:
    msgs = _conversation(6, size=1000)
    sizes = [message_bytes(m) for m in msgs]
    # Room for the last two iterations: the cut is before the fifth assistant message.
    keep = sum(sizes[9:]) + 10
    assert choose_cut(msgs, keep) == 9
    assert choose_cut(msgs, 10) == 11  # nothing fits: the last iteration alone
    assert choose_cut(msgs[:1], 10_000) is None  # a single message: nothing to cut


def test_the_budget_is_the_smaller_of_window_and_body_limit_times_threshold() -> None:
    assert ContextLimits(200_000, 100_000, 0.8).budget_bytes() == 80_000
    assert ContextLimits(10_000, None, 0.5).budget_bytes() == 10_000 * CHARS_PER_TOKEN // 2
    # The provider reported twice the tokens we estimated: the window holds half the bytes.
    assert ContextLimits(10_000, None, 1.0).budget_bytes(2.0) == 10_000 * CHARS_PER_TOKEN // 2


def test_the_transcript_is_bounded_and_names_tools_and_results() -> None:
    msgs = [summary_message("earlier: the user wants pages"), *_conversation(40, size=5000)[1:]]
    text = render_transcript(msgs, limit=20_000, item_limit=300)
    assert len(text) <= 20_100
    assert text.startswith("<summary")
    assert "Assistant called tool fetch" in text and "Tool result:" in text
    assert "characters left out" in text


async def test_an_oversized_item_is_cut_with_a_pointer_to_the_stored_whole() -> None:
    stored: list[str] = []

    async def stash(text: str) -> str:
        stored.append(text)
        return "r-1"

    msgs = _conversation(2, size=2_000_000)
    assert await clip_items(msgs, 50_000, stash) == 2
    result = msgs[2]["content"][0]["content"]
    assert len(result) == 50_000 and 'read_tool_result(id="r-1", page=1)' in result
    assert stored == ["x" * 2_000_000] * 2
    assert await clip_items(msgs, 50_000, None) == 0  # already cut: stable


def test_model_windows_by_prefix_with_operator_and_setup_overrides() -> None:
    assert context_window("claude-sonnet-4-5", "anthropic") == 200_000
    assert context_window("gpt-4.1-mini", "openai") == 1_047_576
    assert context_window("gpt-4o-mini", "openai") == 128_000
    assert context_window("mystery", "openai") == DEFAULT_WINDOW
    assert context_window("qwen", "local") == LOCAL_WINDOW
    assert context_window("claude-x", "anthropic", operator={"claude-x": 50_000}) == 50_000
    assert context_window("claude-x", "anthropic", operator={"claude-x": 50_000},
                          setup=9_000) == 9_000


def test_limits_per_endpoint_a_setup_lowers_the_process_limit_and_names_its_proxys() -> None:
    policy = ContextPolicy(body_limits={"anthropic": 1_000_000}, threshold=0.5)
    assert policy.limits("anthropic", "claude-x", {}).body_limit == 1_000_000
    assert policy.limits("anthropic", "claude-x", {"body_limit": 100_000}).body_limit == 100_000
    # Not above the operator's limit for the process endpoint...
    assert policy.limits("anthropic", "claude-x", {"body_limit": 5_000_000}).body_limit \
        == 1_000_000
    # ...but a tenant's own proxy has its own.
    proxied = policy.limits("anthropic", "claude-x",
                            {"base_url": "https://proxy.example", "body_limit": 5_000_000})
    assert proxied.body_limit == 5_000_000
    assert policy.limits("scripted", "s", {}).body_limit is None
    assert policy.limits("anthropic", "claude-x", {"compaction_model": "claude-h"}).model \
        == "claude-h"


def test_history_starts_from_the_latest_summary() -> None:
    events = [
        {"seq": 1, "kind": "message", "data": {"content": "go"}},
        {"seq": 2, "kind": "assistant", "data": {"content": [
            {"type": "tool_use", "id": "a", "name": "f", "input": {}}]}},
        {"seq": 3, "kind": "tool_results", "data": {"results": [
            {"tool_use_id": "a", "content": "r1"}]}},
        {"seq": 4, "kind": "assistant", "data": {"content": [
            {"type": "tool_use", "id": "b", "name": "f", "input": {}}]}},
        {"seq": 5, "kind": "compaction", "data": {"summary": "old", "through_seq": 1}},
        {"seq": 6, "kind": "tool_results", "data": {"results": [
            {"tool_use_id": "b", "content": "r2"}]}},
        {"seq": 7, "kind": "compaction", "data": {"summary": "new", "through_seq": 3}},
    ]
    msgs = build_messages(events)
    assert msgs[0]["summary"] is True and "new" in msgs[0]["content"][0]["text"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[1]["seq"] == 4 and msgs[2]["content"][0]["tool_use_id"] == "b"


def test_adapters_send_only_role_and_content_not_the_summary_marker_or_seq() -> None:
    msgs = [summary_message("s"), {"role": "assistant", "seq": 9, "content": [
        {"type": "text", "text": "ok"}]}, {"role": "user", "content": [
            {"type": "text", "text": "next"}]}]
    request = ModelRequest(model="m", messages=msgs)
    for body in (anthropic.build_params(request), openai.build_params(request),
                 {"messages": local._chat_messages(msgs)}):
        text = json.dumps(body)
        assert '"summary"' not in text and '"seq"' not in text
        assert all(set(m) <= {"role", "content", "cache_control"} for m in body["messages"])


async def test_the_scripted_provider_reads_past_the_marker() -> None:
    provider = ScriptedProvider([ScriptStep(echo=True)])
    request = ModelRequest(model="m", messages=[summary_message("s"), {
        "role": "assistant", "seq": 2, "content": [{"type": "text", "text": "a"}]},
        {"role": "user", "content": [{"type": "text", "text": "hello"}]}])
    texts = [e.text async for e in provider.stream(request) if hasattr(e, "text")]
    assert "".join(texts) == "You said: hello"


def test_the_cli_shows_a_compaction_as_one_line() -> None:
    out = io.StringIO()
    view = TurnView(Console(file=out, width=120, no_color=True))
    view.started("t1")
    view.event({"kind": "compaction", "data": {"through_seq": 41, "summary": "s",
                                               "bytes_before": 90_000, "bytes_after": 30_000}})
    assert out.getvalue().splitlines()[-1] == (
        "  ⇣ compacted: history through event 41 summarized (90000 -> 30000 bytes)")


def test_a_request_is_measured_once_and_its_measure_goes_with_it() -> None:
    import dataclasses
    import gc

    from ator.providers import size as tokens
    from ator.providers.base import ModelRequest

    request = ModelRequest(model="m", messages=[{"role": "user", "content": "x" * 1000}])
    size = tokens.request_bytes(request)
    assert size > 1000 and tokens.request_bytes(request) == size
    assert id(request) in tokens._MEASURED
    longer = dataclasses.replace(
        request, messages=[*request.messages, {"role": "assistant", "content": "y" * 500}])
    assert tokens.request_bytes(longer) > size + 500  # another request, measured anew
    key = id(request)
    del request
    gc.collect()
    assert key not in tokens._MEASURED  # nothing kept alive for the cache


@pytest.mark.parametrize("tools", [0, 1, 3])
def test_a_request_measured_by_parts_is_exactly_its_whole_document(tools: int) -> None:
    """request_bytes sums system, each tool (kept per spec) and the messages: the sum must be
    the size of the whole document, non-ASCII text and tool-use inputs included."""
    import json

    from ator.providers import size as tokens
    from ator.providers.base import ModelRequest, SystemBlock, ToolSpec

    specs = [ToolSpec(f"t{i}", "décrit — ünïcode", {"type": "object", "properties": {
        "x": {"type": "string", "description": "日本語"}}}) for i in range(tools)]
    messages = [{"role": "user", "content": "héllo"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "t0",
                                                   "input": {"x": "ß" * 10}}]}]
    request = ModelRequest(model="m", messages=messages,
                           system=[SystemBlock("core ✓"), SystemBlock("persona")], tools=specs)
    whole = {"system": [b.text for b in request.system],
             "tools": [{"name": t.name, "description": t.description,
                        "input_schema": t.input_schema} for t in specs],
             "messages": messages}
    expected = len(json.dumps(whole, ensure_ascii=False, separators=(",", ":")).encode())
    assert tokens.request_bytes(request) == expected
    again = ModelRequest(model="m", messages=messages, system=request.system, tools=specs)
    assert tokens.request_bytes(again) == expected  # tools measured from the per-spec cache
