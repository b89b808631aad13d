"""The thread actor on real PostgreSQL: mailbox coalescing, idempotent submit, stop, caps."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal

import pytest

from ator.errors import NotFound, ProviderError
from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.store import events as event_store
from ator.store import mailbox as mailbox_store
from ator.store import threads as thread_store
from ator.store import turns as turn_store
from ator.store.scope import Scope
from ator.tools.base import Tool
from tests.conftest import ended, new_thread, quiet_reaper, wait_for_event


class GatedProvider:
    """Answers each call with the user texts it saw; the first call waits for `gate`."""

    name = "gated"

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        if len(self.requests) == 1:
            self.entered.set()
            await self.gate.wait()
        last = request.messages[-1]
        texts = [b["text"] for b in last["content"] if b["type"] == "text"]
        yield TextDelta("seen: " + " | ".join(texts))
        yield MessageStop("end_turn", Usage(3, 2), request.model)


async def test_messages_arriving_during_a_turn_become_exactly_one_next_turn(make_ator) -> None:
    provider = GatedProvider()
    async with make_ator(providers={"gated": provider}) as ator:
        scope, thread = await new_thread(ator, "gated")
        await ator.submit(scope, thread.id, "first")
        await asyncio.wait_for(provider.entered.wait(), 10)
        for text in ("second", "third", "fourth"):
            await ator.submit(scope, thread.id, text)
        provider.gate.set()
        first_end = await wait_for_event(ator, scope, thread.id, ended)
        second_end = await wait_for_event(ator, scope, thread.id, ended, after_seq=first_end.seq)
        assert second_end.data["stop_reason"] == "end_turn"

        turns = await ator.turns(scope, thread.id)
        assert len(turns) == 2
        assert len(provider.requests) == 2
        # The three queued messages reached the model as one user message of the second turn.
        last_user = provider.requests[1].messages[-1]
        assert last_user["role"] == "user"
        assert [b["text"] for b in last_user["content"]] == ["second", "third", "fourth"]
        events = await ator.events(scope, thread.id)
        second_turn = {e.seq: e for e in events if e.turn_id == turns[0].id}
        assert sum(1 for e in second_turn.values() if e.kind == "message") == 3


async def test_same_client_message_id_runs_once_even_when_concurrent(make_ator) -> None:
    provider = ScriptedProvider([ScriptStep(text="ok")])
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s")
        results = await asyncio.gather(
            *(ator.submit(scope, thread.id, "hello", client_message_id="m-1") for _ in range(8))
        )
        assert sum(created for _item, created in results) == 1
        assert len({item.id for item, _ in results}) == 1
        await wait_for_event(ator, scope, thread.id, ended)
        # A later resend is still a no-op.
        item, created = await ator.submit(scope, thread.id, "hello", client_message_id="m-1")
        assert not created and item.id == results[0][0].id
        events = await ator.events(scope, thread.id)
        assert [e.kind for e in events].count("message") == 1
        assert len(await ator.turns(scope, thread.id)) == 1


async def test_invalid_tool_arguments_reach_the_model_as_an_error_result(make_ator) -> None:
    provider = ScriptedProvider(
        [ScriptStep(tool_calls=[("calculator", {"expr": 42})]), ScriptStep(text="sorry")]
    )
    provider.record_requests = True
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s")
        result = await ator.ask(scope, thread.id, "compute", timeout=30)
        assert result.stop_reason == "end_turn"
        second = provider.requests[1].messages[-1]["content"][0]
        assert second["type"] == "tool_result" and second["is_error"] is True
        assert "Invalid arguments for tool 'calculator'" in second["content"]
        assert "'expression' is a required property" in second["content"]
        stored = [e for e in await ator.events(scope, thread.id) if e.kind == "tool_results"]
        assert stored[0].data["results"][0]["is_error"] is True


async def test_unparseable_tool_json_is_an_error_result_not_an_empty_object(make_ator) -> None:
    provider = ScriptedProvider(
        [ScriptStep(raw_tool_calls=[("calculator", '{"expression": "1+')]), ScriptStep(text="k")]
    )
    provider.record_requests = True
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s")
        await ator.ask(scope, thread.id, "go", timeout=30)
        block = provider.requests[1].messages[-1]["content"][0]
        assert block["is_error"] and "not valid JSON" in block["content"]


async def test_runaway_model_stops_at_the_step_cap(make_ator) -> None:
    provider = ScriptedProvider(
        [ScriptStep(tool_calls=[("current_time", {})])], repeat_last=True
    )
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"max_steps": 4}})
        result = await ator.ask(scope, thread.id, "loop forever", timeout=30)
        assert result.stop_reason == "max_steps"
        turn = await ator.turn(scope, result.turn_id)
        assert turn.steps == 4 and turn.status == "capped"
        kinds = [e.kind for e in await ator.events(scope, thread.id)]
        assert kinds.count("assistant") == 4 and kinds.count("tool_results") == 4


async def test_token_cap_ends_the_turn(make_ator) -> None:
    provider = ScriptedProvider(
        [ScriptStep(tool_calls=[("current_time", {})], usage=Usage(600, 10))], repeat_last=True
    )
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"max_turn_tokens": 1500}})
        result = await ator.ask(scope, thread.id, "spend", timeout=30)
        assert result.stop_reason == "token_cap"
        assert (await ator.turn(scope, result.turn_id)).steps == 3


async def test_a_provider_that_hangs_stops_as_stalled(make_ator) -> None:
    provider = ScriptedProvider([ScriptStep(hang=True)])
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s", config={"caps": {"stall_timeout": 0.3}})
        result = await ator.ask(scope, thread.id, "hello?", timeout=30)
        assert result.stop_reason == "stalled"
        assert result.status == "capped"


async def test_turn_wall_time_cap_is_timeout(make_ator) -> None:
    provider = ScriptedProvider([ScriptStep(hang=True)])
    async with make_ator(providers={"s": provider}) as ator:
        caps = {"stall_timeout": 30, "turn_timeout": 0.3}
        scope, thread = await new_thread(ator, "s", config={"caps": caps})
        result = await ator.ask(scope, thread.id, "hello?", timeout=30)
        assert result.stop_reason == "timeout"


async def test_transient_errors_are_retried_then_succeed(make_ator) -> None:
    calls = 0

    def responder(request: ModelRequest) -> ScriptStep:
        nonlocal calls
        calls += 1
        if calls == 1:
            return ScriptStep(error=ProviderError("overloaded", kind="overloaded", retryable=True,
                                                  retry_after=0.05))
        return ScriptStep(text="fine")

    async with make_ator(providers={"s": ScriptedProvider(responder=responder)}) as ator:
        scope, thread = await new_thread(ator, "s")
        result = await ator.ask(scope, thread.id, "hi", timeout=30)
        assert (result.stop_reason, result.text, calls) == ("end_turn", "fine", 2)


async def test_a_permanent_provider_error_is_typed(make_ator) -> None:
    err = ProviderError("bad key", kind="auth")
    async with make_ator(providers={"s": ScriptedProvider([ScriptStep(error=err)])}) as ator:
        scope, thread = await new_thread(ator, "s")
        result = await ator.ask(scope, thread.id, "hi", timeout=30)
        assert (result.status, result.stop_reason) == ("error", "error:auth")


async def test_stop_cancels_the_running_turn_with_its_reason(make_ator) -> None:
    provider = GatedProvider()
    async with make_ator(providers={"gated": provider}) as ator:
        scope, thread = await new_thread(ator, "gated")
        await ator.submit(scope, thread.id, "long job")
        await asyncio.wait_for(provider.entered.wait(), 10)
        await ator.stop(scope, thread.id)
        event = await wait_for_event(ator, scope, thread.id, ended)
        assert event.data["stop_reason"] == "cancelled:user"
        assert (await ator.turns(scope, thread.id))[0].status == "stopped"
        # The thread is usable again.
        provider.gate.set()
        result = await ator.ask(scope, thread.id, "again", timeout=30)
        assert result.stop_reason == "end_turn"


async def test_org_budget_stops_turns_once_spent(make_ator) -> None:
    step = ScriptStep(text="pricey", usage=Usage(input_tokens=1_000_000, output_tokens=0))
    provider = ScriptedProvider([step], repeat_last=True)
    async with make_ator(providers={"s": provider}) as ator:
        # claude-haiku-4-5 input is $1/MTok: the first turn spends the whole $1 budget.
        scope, thread = await new_thread(ator, "s", model="claude-haiku-4-5",
                                         budget=Decimal("1.00"))
        first = await ator.ask(scope, thread.id, "one", timeout=30)
        assert first.stop_reason == "end_turn" and first.cost_usd == Decimal("1")
        second = await ator.ask(scope, thread.id, "two", timeout=30)
        assert second.stop_reason == "budget"
        assert (await ator.turn(scope, second.turn_id)).steps == 0


async def test_unpriced_model_with_a_budget_fails_closed(make_ator) -> None:
    async with make_ator(providers={"s": ScriptedProvider([ScriptStep(text="x")])}) as ator:
        scope, thread = await new_thread(ator, "s", model="mystery-model",
                                         budget=Decimal("5"))
        result = await ator.ask(scope, thread.id, "hi", timeout=30)
        assert result.stop_reason == "budget"


async def test_another_orgs_thread_is_not_found(make_ator) -> None:
    async with make_ator(providers={"s": ScriptedProvider([ScriptStep(text="x")])}) as ator:
        scope, thread = await new_thread(ator, "s")
        result = await ator.ask(scope, thread.id, "secret plans", timeout=30)
        other = Scope((await ator.create_org("intruder")).id)
        with pytest.raises(NotFound):
            await thread_store.get_thread(ator.db, other, thread.id)
        with pytest.raises(NotFound):
            await mailbox_store.submit(ator.db, other, thread.id, client_message_id="x",
                                       kind="message", content={})
        with pytest.raises(NotFound):
            await turn_store.get_turn(ator.db, other, result.turn_id)
        with pytest.raises(NotFound):
            await turn_store.start_turn(ator.db, other, thread.id, uuid.uuid4(), owner="x")
        assert await event_store.read_events(ator.db, other, thread.id) == []
        assert await turn_store.list_turns(ator.db, other, thread.id) == []
        assert await thread_store.list_threads(ator.db, other) == []
        with pytest.raises(NotFound):
            await ator.stop(other, thread.id)


async def test_a_fast_one_tool_turn_costs_two_statements_that_bill_both_calls(
    make_ator,
) -> None:
    from ator.providers.scripted import tool_then_answer
    from ator.store import model_calls as call_store

    provider = tool_then_answer("calculator", {"expression": "6*7"}, "42")
    # The reaper and the heartbeat share the statement counter: keep them out of the window.
    async with make_ator(providers={"s": provider}, lease_ttl=60.0) as ator:
        await quiet_reaper(ator)
        scope, thread = await new_thread(ator, "s", model="claude-haiku-4-5")
        await ator.ask(scope, thread.id, "warm up", timeout=30)  # first-connection queries
        statements, commits = ator.db.stats.snapshot()
        result = await ator.ask(scope, thread.id, "6*7?", timeout=30)
        after = ator.db.stats.snapshot()
        assert result.text == "42"
        # submit and start in one (insert + context + drain + turn + events); then the step
        # (reply + results), held while the instant second call ran, with that call's reply
        # and the turn's end.
        assert (after[0] - statements, after[1] - commits) == (2, 2)
        events = [e for e in await ator.events(scope, thread.id) if e.turn_id == result.turn_id]
        assert [e.kind for e in events] == [
            "turn_started", "message", "assistant", "tool_results", "assistant", "turn_ended"]
        assert [e.seq for e in events] == list(range(events[0].seq, events[0].seq + 6))
        # Both calls are billed by that one write, in order, and their usage adds up.
        calls = (await call_store.turn_calls(ator.db, scope, result.turn_id)).calls
        assert [(c.step, c.stop_reason) for c in calls] == [(1, "tool_use"), (2, "end_turn")]
        assert calls[0].id < calls[1].id
        turn = await turn_store.get_turn(ator.db, scope, result.turn_id)
        assert (turn.steps, turn.input_tokens, turn.output_tokens) == (2, 20, 10)
        assert turn.cost_usd == sum((c.cost_usd for c in calls), Decimal(0)) > 0
        assert events[-1].data["cost_usd"] == str(turn.cost_usd)


class _GatedSecondCall:
    """A scripted provider whose second call of a turn waits for `gate` (after `entered`)."""

    name = "gated-second"

    def __init__(self, steps: list[ScriptStep]) -> None:
        self.inner = ScriptedProvider(steps)
        self.calls = 0
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        if self.calls == 2:
            self.entered.set()
            await self.gate.wait()
        async for event in self.inner.stream(request):
            yield event


def _tool_then_text() -> _GatedSecondCall:
    return _GatedSecondCall([
        ScriptStep(tool_calls=[("calculator", {"expression": "6*7"})], usage=Usage(1_000, 100)),
        ScriptStep(text="42", usage=Usage(2_000, 200)),
    ])


async def test_a_slow_model_call_has_the_step_before_it_persisted_while_it_runs(
    make_ator,
) -> None:
    provider = _tool_then_text()
    async with make_ator(providers={"g": provider}) as ator:
        scope, thread = await new_thread(ator, "g", config={"caps": {"persist_calls_after": 0.01}})
        await ator.submit(scope, thread.id, "go")
        await asyncio.wait_for(provider.entered.wait(), 10)
        # The second call is still waiting: the step before it is durable (and announced).
        results = await wait_for_event(ator, scope, thread.id, lambda e: e.kind == "tool_results")
        assert results.data["results"][0]["content"] == "42"
        turn = (await ator.turns(scope, thread.id))[0]
        assert (turn.status, turn.steps, turn.input_tokens) == ("running", 1, 1_000)
        provider.gate.set()
        end = await wait_for_event(ator, scope, thread.id, ended, after_seq=results.seq)
        assert end.data["stop_reason"] == "end_turn"
        turn = (await ator.turns(scope, thread.id))[0]
        assert (turn.steps, turn.input_tokens, turn.output_tokens) == (2, 3_000, 300)


async def test_a_stop_during_the_next_call_writes_the_held_step_with_the_end(make_ator) -> None:
    provider = _tool_then_text()
    async with make_ator(providers={"g": provider}) as ator:
        scope, thread = await new_thread(ator, "g", model="claude-haiku-4-5",
                                         config={"caps": {"persist_calls_after": 60}})
        await ator.submit(scope, thread.id, "go")
        await asyncio.wait_for(provider.entered.wait(), 10)
        # Held while the next call runs: nothing of the step is written yet.
        assert [e.kind for e in await ator.events(scope, thread.id)] == [
            "turn_started", "message"]
        await ator.stop(scope, thread.id)
        end = await wait_for_event(ator, scope, thread.id, ended)
        assert end.data["stop_reason"] == "cancelled:user"
        kinds = [e.kind for e in await ator.events(scope, thread.id)]
        assert kinds == ["turn_started", "message", "assistant", "tool_results", "turn_ended"]
        # The first call is billed by the end's write; the second never reported anything.
        turn = (await ator.turns(scope, thread.id))[0]
        assert (turn.steps, turn.input_tokens, turn.output_tokens) == (1, 1_000, 100)
        assert turn.cost_usd == Decimal("0.0015")  # $1/MTok in, $5/MTok out


def _blocking_tool(started: asyncio.Event, release: asyncio.Event) -> Tool:
    async def handler(args: dict[str, object], ctx: object) -> str:
        started.set()
        await release.wait()
        return "finished"

    return Tool("slow", "A slow tool.", {"type": "object"}, handler)


async def test_a_slow_tools_call_is_persisted_before_its_result(make_ator) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    provider = ScriptedProvider([ScriptStep(tool_calls=[("slow", {})]), ScriptStep(text="ok")])
    async with make_ator(providers={"s": provider}, tools=[_blocking_tool(started, release)]) as a:
        scope, thread = await new_thread(a, "s", config={"caps": {"persist_calls_after": 0.01}})
        await a.submit(scope, thread.id, "go")
        await asyncio.wait_for(started.wait(), 10)
        call = await wait_for_event(a, scope, thread.id, lambda e: e.kind == "assistant")
        assert call.data["content"][0]["name"] == "slow"
        assert not [e for e in await a.events(scope, thread.id) if e.kind == "tool_results"]
        release.set()
        end = await wait_for_event(a, scope, thread.id, ended, after_seq=call.seq)
        assert end.data["stop_reason"] == "end_turn"


async def test_stopping_during_tools_keeps_the_model_call_and_its_cost(make_ator) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    step = ScriptStep(tool_calls=[("slow", {})], usage=Usage(1_000, 100))
    provider = ScriptedProvider([step])
    async with make_ator(providers={"s": provider}, tools=[_blocking_tool(started, release)]) as a:
        scope, thread = await new_thread(a, "s", model="claude-haiku-4-5",
                                         config={"caps": {"persist_calls_after": 60}})
        await a.submit(scope, thread.id, "go")
        await asyncio.wait_for(started.wait(), 10)
        await a.stop(scope, thread.id)
        end = await wait_for_event(a, scope, thread.id, ended)
        assert end.data["stop_reason"] == "cancelled:user"
        kinds = [e.kind for e in await a.events(scope, thread.id)]
        assert kinds[-2:] == ["assistant", "turn_ended"]
        turn = (await a.turns(scope, thread.id))[0]
        assert (turn.input_tokens, turn.output_tokens) == (1_000, 100)
        assert turn.cost_usd == Decimal("0.0015")  # $1/MTok in, $5/MTok out


async def test_a_stop_during_the_turns_first_statement_is_not_lost(
    make_ator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn's first statement is slowed down (a gate before the real one) so a stop
    lands while it runs: the stop must be applied as soon as the turn exists."""
    entered, release = asyncio.Event(), asyncio.Event()
    real_start = turn_store._start

    async def slow_start(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        entered.set()
        await release.wait()
        return await real_start(*args, **kwargs)  # type: ignore[arg-type]

    # Both ways a turn starts (a post to an idle thread, a drain) run this one statement.
    monkeypatch.setattr(turn_store, "_start", slow_start)
    provider = GatedProvider()  # would wait forever if the stop were lost
    async with make_ator(providers={"gated": provider}) as ator:
        scope, thread = await new_thread(ator, "gated")
        # To an idle thread the submit is the turn's first statement: it returns once that
        # statement committed, so it is left running here.
        posting = asyncio.create_task(ator.submit(scope, thread.id, "work"))
        await asyncio.wait_for(entered.wait(), 10)
        await ator.stop(scope, thread.id)
        handle = ator.actor.running[thread.id]
        for _ in range(1000):  # the abort listener is a task: let it run, no wall-clock wait
            if handle.reason is not None:
                break
            await asyncio.sleep(0)
        assert handle.reason == "user" and not handle.started
        release.set()
        _item, created = await posting
        assert created
        event = await wait_for_event(ator, scope, thread.id, ended)
        assert event.data["stop_reason"] == "cancelled:user"
        assert provider.requests == []  # stopped before the first model call
