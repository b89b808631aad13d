"""Every cap of `agent/caps.py`, seen from outside: what the turn record and its events say,
and what the provider was sent.

Each test sets one cap low in the setup's `config.caps` and leaves the others at values that
cannot interfere, so a cap that stopped working (or fired one step early or late) fails the
test. Statuses are left to the engine's reshape: only `stop_reason` is asserted, except
`status == "done"` where the model itself finished.
"""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
import warnings
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from ator import Scope
from ator.errors import ConfigError, ProviderError, ToolError, ValidationFailed
from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.tools.base import Tool, ToolContext
from tests.conftest import ended, new_thread, wait_for_event

NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}


def make_tool(
    name: str,
    handler: Any,
    *,
    description: str = "A test tool.",
    schema: dict[str, Any] | None = None,
    timeout: float | None = None,
) -> Tool:
    return Tool(name, description, schema if schema is not None else NO_ARGS, handler,
                timeout=timeout)


async def _ok(args: dict[str, Any], ctx: ToolContext) -> str:
    return "ok"


async def _forever(args: dict[str, Any], ctx: ToolContext) -> str:
    await asyncio.Event().wait()  # a tool that never answers; only a timeout ends it
    raise AssertionError("unreachable")


def recording(steps: list[ScriptStep], *, repeat_last: bool = False) -> ScriptedProvider:
    provider = ScriptedProvider(steps, repeat_last=repeat_last)
    provider.record_requests = True
    return provider


def tool_results(events: list[Any]) -> list[dict[str, Any]]:
    return [r for e in events if e.kind == "tool_results" for r in e.data["results"]]


# Steps ------------------------------------------------------------------------------------


async def test_max_steps_ends_a_runaway_tool_loop_after_exactly_that_many_model_calls(
    make_ator,
) -> None:
    provider = recording([ScriptStep(tool_calls=[("ping", {})])], repeat_last=True)
    async with make_ator(providers={"s": provider}, tools=[make_tool("ping", _ok)]) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"max_steps": 3}})
        result = await ator.ask(scope, thread.id, "loop", timeout=10)
        assert result.stop_reason == "max_steps"
        assert len(provider.requests) == 3
        turn = await ator.turn(scope, result.turn_id)
        assert (turn.stop_reason, turn.steps) == ("max_steps", 3)
        events = await ator.events(scope, thread.id)
        assert [e.kind for e in events].count("assistant") == 3
        end = next(e for e in events if e.kind == "turn_ended")
        assert end.data["stop_reason"] == "max_steps" and end.data["steps"] == 3


async def test_a_model_that_finishes_on_the_last_allowed_step_is_not_capped(make_ator) -> None:
    provider = recording([ScriptStep(tool_calls=[("ping", {})]),
                          ScriptStep(tool_calls=[("ping", {})]),
                          ScriptStep(text="finished")])
    async with make_ator(providers={"s": provider}, tools=[make_tool("ping", _ok)]) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"max_steps": 3}})
        result = await ator.ask(scope, thread.id, "go", timeout=10)
        assert (result.stop_reason, result.status, result.text) == ("end_turn", "done",
                                                                    "finished")
        assert (await ator.turn(scope, result.turn_id)).steps == 3


# Tokens -----------------------------------------------------------------------------------


async def test_max_turn_tokens_ends_the_turn_once_the_sum_reaches_the_cap(make_ator) -> None:
    # 610 tokens a call: 610, 1220, 1830 >= 1500 -> the cap fires after the third call.
    step = ScriptStep(tool_calls=[("ping", {})], usage=Usage(600, 10))
    provider = recording([step], repeat_last=True)
    async with make_ator(providers={"s": provider}, tools=[make_tool("ping", _ok)]) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"max_turn_tokens": 1500}})
        result = await ator.ask(scope, thread.id, "spend", timeout=10)
        assert result.stop_reason == "token_cap"
        assert len(provider.requests) == 3
        turn = await ator.turn(scope, result.turn_id)
        assert (turn.steps, turn.input_tokens, turn.output_tokens) == (3, 1800, 30)
        assert result.usage["input_tokens"] == 1800


async def test_cache_tokens_count_toward_the_turn_token_cap(make_ator) -> None:
    # 10 + 5 + 1000 cache read + 0 write = 1015 a call: the cap of 2000 fires after call 2.
    step = ScriptStep(tool_calls=[("ping", {})],
                      usage=Usage(10, 5, cache_read_tokens=1000))
    provider = recording([step], repeat_last=True)
    async with make_ator(providers={"s": provider}, tools=[make_tool("ping", _ok)]) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"max_turn_tokens": 2000}})
        result = await ator.ask(scope, thread.id, "spend", timeout=10)
        assert result.stop_reason == "token_cap"
        assert len(provider.requests) == 2


# Wall time and silence --------------------------------------------------------------------


class Chatty:
    """Streams a delta every `every` seconds, `count` times (forever when None), then stops."""

    name = "chatty"

    def __init__(self, every: float, count: int | None) -> None:
        self.every = every
        self.count = count
        self.calls = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        n = 0
        while self.count is None or n < self.count:
            await asyncio.sleep(self.every)  # simulated generation time, not a wait
            n += 1
            yield TextDelta(".")
        yield MessageStop("end_turn", Usage(1, n), request.model)


async def test_turn_timeout_ends_a_turn_whose_provider_never_goes_quiet(make_ator) -> None:
    # The provider is never silent for the stall cap: only wall time can end this turn.
    provider = Chatty(every=0.05, count=None)
    async with make_ator(providers={"chatty": provider}) as ator:
        caps = {"turn_timeout": 0.5, "stall_timeout": 30}
        scope, thread = await new_thread(ator, "chatty", config={"caps": caps})
        started = time.monotonic()
        result = await ator.ask(scope, thread.id, "talk", timeout=10)
        assert result.stop_reason == "timeout"
        assert time.monotonic() - started < 4
        turn = await ator.turn(scope, result.turn_id)
        assert turn.stop_reason == "timeout" and "0.5" in (turn.error or "")


async def test_turn_timeout_also_covers_time_spent_in_tools(make_ator) -> None:
    provider = recording([ScriptStep(tool_calls=[("stuck", {})])])
    async with make_ator(providers={"s": provider},
                         tools=[make_tool("stuck", _forever)]) as ator:
        caps = {"turn_timeout": 0.5, "tool_timeout": 30}
        scope, thread = await new_thread(ator, "s", config={"caps": caps})
        result = await ator.ask(scope, thread.id, "go", timeout=10)
        assert result.stop_reason == "timeout"
        assert len(provider.requests) == 1
        # The model call made before the tool hung is kept, with what it consumed.
        events = await ator.events(scope, thread.id)
        [reply] = [e for e in events if e.kind == "assistant"]
        assert [b["name"] for b in reply.data["content"] if b["type"] == "tool_use"] == ["stuck"]
        turn = await ator.turn(scope, result.turn_id)
        assert (turn.steps, turn.input_tokens, turn.output_tokens) == (1, 10, 5)


async def test_stall_timeout_ends_a_provider_that_goes_silent_mid_stream(make_ator) -> None:
    # One event (thinking), then nothing: the watchdog must fire after the first event too.
    provider = recording([ScriptStep(thinking="hmm", hang=True)])
    async with make_ator(providers={"s": provider}) as ator:
        caps = {"stall_timeout": 0.3, "turn_timeout": 30}
        scope, thread = await new_thread(ator, "s", config={"caps": caps})
        started = time.monotonic()
        result = await ator.ask(scope, thread.id, "hello?", timeout=10)
        assert result.stop_reason == "stalled"
        assert time.monotonic() - started < 4
        turn = await ator.turn(scope, result.turn_id)
        assert turn.stop_reason == "stalled" and "0.3" in (turn.error or "")


async def test_a_slow_but_steady_stream_longer_than_the_stall_cap_is_not_stalled(
    make_ator,
) -> None:
    # 8 deltas 0.1 s apart: 0.8 s in all, never 0.3 s silent. The watchdog is per event.
    provider = Chatty(every=0.1, count=8)
    async with make_ator(providers={"chatty": provider}) as ator:
        caps = {"stall_timeout": 0.3, "turn_timeout": 30}
        scope, thread = await new_thread(ator, "chatty", config={"caps": caps})
        result = await ator.ask(scope, thread.id, "talk slowly", timeout=10)
        assert (result.stop_reason, result.status, result.text) == ("end_turn", "done",
                                                                    "." * 8)


# Tools ------------------------------------------------------------------------------------


async def test_the_caps_tool_timeout_is_the_default_for_every_tool(make_ator) -> None:
    provider = recording([ScriptStep(tool_calls=[("stuck", {})]), ScriptStep(text="gave up")])
    async with make_ator(providers={"s": provider},
                         tools=[make_tool("stuck", _forever)]) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"tool_timeout": 0.2}})
        result = await ator.ask(scope, thread.id, "go", timeout=10)
        assert (result.stop_reason, result.status) == ("end_turn", "done")
        sent = provider.requests[1].messages[-1]["content"][0]
        assert sent["type"] == "tool_result" and sent["is_error"] is True
        assert sent["content"] == "tool_timeout: the tool did not answer within 0.2s"
        [stored] = tool_results(await ator.events(scope, thread.id))
        assert stored["is_error"] is True and stored["content"].startswith("tool_timeout: ")


async def test_a_tools_own_timeout_overrides_the_caps_default_downwards(make_ator) -> None:
    provider = recording([ScriptStep(tool_calls=[("stuck", {})]), ScriptStep(text="gave up")])
    tool = make_tool("stuck", _forever, timeout=0.2)
    async with make_ator(providers={"s": provider}, tools=[tool]) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"tool_timeout": 60}})
        started = time.monotonic()
        result = await ator.ask(scope, thread.id, "go", timeout=10)
        assert result.stop_reason == "end_turn"
        assert time.monotonic() - started < 4
        sent = provider.requests[1].messages[-1]["content"][0]
        assert sent["is_error"] is True and "did not answer within 0.2s" in sent["content"]


async def test_a_tools_own_timeout_overrides_the_caps_default_upwards(make_ator) -> None:
    async def slow(args: dict[str, Any], ctx: ToolContext) -> str:
        await asyncio.sleep(0.4)  # simulated work, longer than the cap's default
        return "slow answer"

    provider = recording([ScriptStep(tool_calls=[("slow", {})]), ScriptStep(text="thanks")])
    async with make_ator(providers={"s": provider},
                         tools=[make_tool("slow", slow, timeout=10)]) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"tool_timeout": 0.1}})
        result = await ator.ask(scope, thread.id, "go", timeout=10)
        assert result.stop_reason == "end_turn"
        sent = provider.requests[1].messages[-1]["content"][0]
        assert (sent["is_error"], sent["content"]) == (False, "slow answer")


async def test_one_timed_out_tool_does_not_take_its_siblings_results_with_it(make_ator) -> None:
    provider = recording([ScriptStep(tool_calls=[("stuck", {}), ("ping", {})]),
                          ScriptStep(text="partly")])
    tools = [make_tool("stuck", _forever), make_tool("ping", _ok)]
    async with make_ator(providers={"s": provider}, tools=tools) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"tool_timeout": 0.2}})
        await ator.ask(scope, thread.id, "go", timeout=10)
        stuck, ping = provider.requests[1].messages[-1]["content"]
        assert stuck["is_error"] is True and stuck["content"].startswith("tool_timeout: ")
        assert (ping["is_error"], ping["content"]) == (False, "ok")


@pytest.mark.parametrize("fails", [False, True], ids=["result", "error"])
async def test_tool_results_over_the_cap_are_cut_with_a_marker(make_ator, fails: bool) -> None:
    body = "".join(f"{i:05d}" for i in range(1000))  # 5000 characters, every cut visible

    async def big(args: dict[str, Any], ctx: ToolContext) -> str:
        if fails:
            raise ToolError(body)
        return body

    provider = recording([ScriptStep(tool_calls=[("big", {})]), ScriptStep(text="read it")])
    async with make_ator(providers={"s": provider}, tools=[make_tool("big", big)]) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"tool_result_chars": 1000}})
        result = await ator.ask(scope, thread.id, "go", timeout=10)
        assert result.stop_reason == "end_turn"
        sent = provider.requests[1].messages[-1]["content"][0]
        assert sent["is_error"] is fails
        assert len(sent["content"]) <= 1000
        whole = f"tool_error: {body}" if fails else body
        # The kept part is the beginning of the real result, and the marker says how much.
        kept = sent["content"].split("\n[truncated")[0]
        assert len(kept) > 500 and whole.startswith(kept)
        assert sent["content"].endswith(f"[truncated: showing {len(kept)} of {len(whole)} "
                                        "characters]")
        [stored] = tool_results(await ator.events(scope, thread.id))
        assert stored["content"] == sent["content"]
        assert stored["truncated_from"] == len(whole)


async def test_a_tool_result_at_the_cap_is_not_cut(make_ator) -> None:
    body = "y" * 1000

    async def exact(args: dict[str, Any], ctx: ToolContext) -> str:
        return body

    provider = recording([ScriptStep(tool_calls=[("exact", {})]), ScriptStep(text="k")])
    async with make_ator(providers={"s": provider}, tools=[make_tool("exact", exact)]) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"tool_result_chars": 1000}})
        await ator.ask(scope, thread.id, "go", timeout=10)
        assert provider.requests[1].messages[-1]["content"][0]["content"] == body
        [stored] = tool_results(await ator.events(scope, thread.id))
        assert stored["truncated_from"] is None


async def test_tool_descriptions_over_the_cap_reach_the_model_cut(make_ator) -> None:
    long_desc = "Looks things up. " + "".join(f"<{i:04d}>" for i in range(200))  # 1217 chars
    tools = [make_tool("wordy", _ok, description=long_desc),
             make_tool("terse", _ok, description="Short and sweet.")]
    provider = recording([ScriptStep(text="hi")])
    async with make_ator(providers={"s": provider}, tools=tools) as ator:
        scope, thread = await new_thread(ator, "s",
                                         config={"caps": {"tool_description_chars": 150}})
        await ator.ask(scope, thread.id, "hello", timeout=10)
        specs = {t.name: t for t in provider.requests[0].tools}
        assert set(specs) == {"wordy", "terse"}
        wordy = specs["wordy"].description
        assert len(wordy) <= 150 and wordy.startswith("Looks things up. <0000>")
        kept = wordy.split("\n[truncated")[0]  # the marker says what it kept, truly
        assert wordy == f"{kept}\n[truncated: showing {len(kept)} of {len(long_desc)} characters]"
        assert specs["terse"].description == "Short and sweet."
        # The cut text is all the model gets: the system prompt does not carry the rest.
        system = "\n".join(block.text for block in provider.requests[0].system)
        assert "<0150>" not in system and "<0150>" not in wordy


async def test_max_output_tokens_is_what_every_model_call_asks_for(make_ator) -> None:
    provider = recording([ScriptStep(tool_calls=[("ping", {})]), ScriptStep(text="done")])
    async with make_ator(providers={"s": provider}, tools=[make_tool("ping", _ok)]) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"max_output_tokens": 321}})
        await ator.ask(scope, thread.id, "go", timeout=10)
        assert [r.max_tokens for r in provider.requests] == [321, 321]


# Provider retries -------------------------------------------------------------------------


def always_failing(error: ProviderError) -> tuple[ScriptedProvider, list[ModelRequest]]:
    seen: list[ModelRequest] = []

    def responder(request: ModelRequest) -> ScriptStep:
        seen.append(request)
        return ScriptStep(error=error)

    return ScriptedProvider(responder=responder), seen


@pytest.mark.parametrize("retries", [0, 1, 2])
async def test_transient_errors_are_retried_provider_retries_times_then_end_the_turn(
    make_ator, retries: int,
) -> None:
    provider, seen = always_failing(
        ProviderError("overloaded, try later", kind="overloaded", retryable=True, retry_after=0)
    )
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s",
                                         config={"caps": {"provider_retries": retries}})
        result = await ator.ask(scope, thread.id, "hi", timeout=10)
        assert result.stop_reason == "error:overloaded"
        assert len(seen) == retries + 1
        turn = await ator.turn(scope, result.turn_id)
        assert turn.stop_reason == "error:overloaded"
        assert "overloaded, try later" in (turn.error or "")


async def test_a_permanent_provider_error_is_not_retried(make_ator) -> None:
    provider, seen = always_failing(ProviderError("bad request", kind="invalid_request"))
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"provider_retries": 3}})
        result = await ator.ask(scope, thread.id, "hi", timeout=10)
        assert result.stop_reason == "error:invalid_request"
        assert len(seen) == 1


# Tool names -------------------------------------------------------------------------------


async def open_refused(make_ator: Any, tools: list[Tool]) -> None:
    """Open an Ator that must refuse its tools. Today the refusal leaks the database pool it
    opened first (see the xfail below); collect it here, with its ResourceWarning silenced,
    so the warning does not land in whichever later test the garbage collector runs in."""
    try:
        async with make_ator(providers={"s": recording([])}, tools=tools):
            pass
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()


async def test_two_tools_with_one_name_and_different_schemas_are_a_config_error(
    make_ator,
) -> None:
    first = make_tool("lookup", _ok, schema={"type": "object",
                                            "properties": {"q": {"type": "string"}}})
    second = make_tool("lookup", _ok, schema={"type": "object",
                                             "properties": {"id": {"type": "integer"}}})
    with pytest.raises(ConfigError, match="two tools named 'lookup'"):
        await open_refused(make_ator, [first, second])


async def test_a_refused_tool_configuration_leaves_no_connection_open(
    make_ator, database_url: str
) -> None:
    first = make_tool("lookup", _ok, schema={"type": "object", "required": ["q"]})
    second = make_tool("lookup", _ok, schema={"type": "object", "required": ["id"]})
    conn = await asyncpg.connect(database_url)
    try:
        since = await conn.fetchval("SELECT clock_timestamp()")
        with pytest.raises(ConfigError):
            await open_refused(make_ator, [first, second])
        opened = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'ator' AND backend_start > $1", since)
    finally:
        await conn.close()
    assert opened == 0


async def test_two_tools_with_one_name_and_the_same_schema_mount_once(make_ator) -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    first = make_tool("lookup", _ok, schema=schema, description="first")
    second = make_tool("lookup", _ok, schema=dict(schema), description="second")
    provider = recording([ScriptStep(text="hi")])
    async with make_ator(providers={"s": provider}, tools=[first, second]) as ator:
        scope, thread = await new_thread(ator, "s")
        result = await ator.ask(scope, thread.id, "hello", timeout=10)
        assert result.stop_reason == "end_turn"
        assert [t.name for t in provider.requests[0].tools] == ["lookup"]


async def test_caps_in_a_setup_are_checked_when_the_setup_is_created(make_ator) -> None:
    async with make_ator(providers={"s": recording([])}) as ator:
        org = await ator.create_org(f"org-{uuid.uuid4().hex[:6]}")
        for bad in ({"max_stepz": 3}, {"max_steps": 0}, {"tool_timeout": "soon"},
                    {"tool_result_chars": -1}):
            with pytest.raises(ValidationFailed) as refused:
                await ator.create_setup(Scope(org.id), name="s", provider="s",
                                        model="scripted", config={"caps": bad})
            assert refused.value.status == 422 and refused.value.code == "invalid_cap"


async def test_the_turn_ended_event_carries_the_stop_reason_a_client_reads(make_ator) -> None:
    # What a client following events (not `ask`) sees when a cap fires.
    provider = recording([ScriptStep(tool_calls=[("ping", {})])], repeat_last=True)
    async with make_ator(providers={"s": provider}, tools=[make_tool("ping", _ok)]) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"max_steps": 2}})
        await ator.submit(scope, thread.id, "loop")
        event = await wait_for_event(ator, scope, thread.id, ended, timeout=10)
        assert event.data["stop_reason"] == "max_steps"
        assert event.data["steps"] == 2
