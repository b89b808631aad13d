"""The agent loop's branches by stop reason, seen from outside: `pause_turn` calls the model
again with its partial answer, `max_tokens` and `refusal` end the turn with that reason (and
run none of the tools the cut-off reply asked for), `end_turn` / `stop_sequence` are the
model finishing.

Only `stop_reason` is asserted for turns the model did not finish; `status == "done"` only
where it did.
"""

from __future__ import annotations

from typing import Any

import pytest

from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.tools.base import Tool, ToolContext
from tests.conftest import new_thread

NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}


class CountingTool:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> str:
        self.calls += 1
        return "pong"

    def tool(self) -> Tool:
        return Tool("ping", "Answers pong.", NO_ARGS, self)


def recording(steps: list[ScriptStep], *, repeat_last: bool = False) -> ScriptedProvider:
    provider = ScriptedProvider(steps, repeat_last=repeat_last)
    provider.record_requests = True
    return provider


def texts(message: dict[str, Any]) -> list[str]:
    return [b["text"] for b in message["content"] if b["type"] == "text"]


async def test_pause_turn_calls_the_model_again_with_its_partial_answer(make_ator) -> None:
    provider = recording([ScriptStep(text="part one", stop_reason="pause_turn"),
                          ScriptStep(text="part two")])
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s")
        result = await ator.ask(scope, thread.id, "long task", timeout=10)
        assert (result.stop_reason, result.status) == ("end_turn", "done")
        assert len(provider.requests) == 2
        # The second call continues from the paused reply: it is the last message sent.
        second = provider.requests[1].messages
        assert second[-1]["role"] == "assistant" and texts(second[-1]) == ["part one"]
        assert texts(second[-2]) == ["long task"]
        assert result.text == "part one\npart two"
        turn = await ator.turn(scope, result.turn_id)
        assert turn.steps == 2
        # Both replies are persisted, the paused one with its own stop reason.
        stops = [e.data["stop_reason"] for e in await ator.events(scope, thread.id)
                 if e.kind == "assistant"]
        assert stops == ["pause_turn", "end_turn"]


async def test_a_model_that_keeps_pausing_is_still_held_to_max_steps(make_ator) -> None:
    provider = recording([ScriptStep(text="still going", stop_reason="pause_turn")],
                         repeat_last=True)
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"max_steps": 3}})
        result = await ator.ask(scope, thread.id, "go", timeout=10)
        assert result.stop_reason == "max_steps"
        assert len(provider.requests) == 3


@pytest.mark.parametrize("reason", ["max_tokens", "refusal"])
async def test_max_tokens_and_refusal_end_the_turn_with_that_reason(
    make_ator, reason: str
) -> None:
    provider = recording([ScriptStep(text="partial", stop_reason=reason),
                          ScriptStep(text="must not be asked")])
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s")
        result = await ator.ask(scope, thread.id, "write a lot", timeout=10)
        assert result.stop_reason == reason
        assert len(provider.requests) == 1  # no continuation call
        assert result.text == "partial"  # what the model produced is kept
        turn = await ator.turn(scope, result.turn_id)
        assert (turn.stop_reason, turn.steps) == (reason, 1)
        end = [e for e in await ator.events(scope, thread.id) if e.kind == "turn_ended"]
        assert [e.data["stop_reason"] for e in end] == [reason]


@pytest.mark.parametrize("reason", ["max_tokens", "refusal"])
async def test_tools_asked_for_by_a_cut_off_reply_are_not_run(make_ator, reason: str) -> None:
    counter = CountingTool()
    provider = recording([ScriptStep(tool_calls=[("ping", {})], stop_reason=reason)])
    async with make_ator(providers={"s": provider}, tools=[counter.tool()]) as ator:
        scope, thread = await new_thread(ator, "s")
        result = await ator.ask(scope, thread.id, "ping", timeout=10)
        assert result.stop_reason == reason
        assert counter.calls == 0
        assert len(provider.requests) == 1
        # The next turn's history answers the dangling call, so it stays valid for any API.
        await ator.ask(scope, thread.id, "again", timeout=10)
        history = provider.requests[-1].messages
        call = next(b for m in history for b in m["content"] if b["type"] == "tool_use")
        answer = next(b for m in history for b in m["content"]
                      if b["type"] == "tool_result" and b["tool_use_id"] == call["id"])
        assert answer["is_error"] is True and reason in answer["content"]


@pytest.mark.parametrize("reason", ["end_turn", "stop_sequence"])
async def test_end_turn_and_stop_sequence_are_the_model_finishing(
    make_ator, reason: str
) -> None:
    provider = recording([ScriptStep(text="all done", stop_reason=reason)])
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s")
        result = await ator.ask(scope, thread.id, "hi", timeout=10)
        assert (result.stop_reason, result.status, result.text) == ("end_turn", "done",
                                                                    "all done")
        assert len(provider.requests) == 1


async def test_tool_use_runs_the_tools_and_continues(make_ator) -> None:
    counter = CountingTool()
    provider = recording([ScriptStep(tool_calls=[("ping", {}), ("ping", {})]),
                          ScriptStep(text="got two pongs")])
    async with make_ator(providers={"s": provider}, tools=[counter.tool()]) as ator:
        scope, thread = await new_thread(ator, "s")
        result = await ator.ask(scope, thread.id, "ping twice", timeout=10)
        assert (result.stop_reason, result.status) == ("end_turn", "done")
        assert counter.calls == 2
        results = provider.requests[1].messages[-1]["content"]
        assert [(b["type"], b["content"]) for b in results] == [("tool_result", "pong")] * 2
