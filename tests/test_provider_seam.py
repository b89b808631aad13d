"""The open provider seam, driven from outside `providers/`: a provider registered by factory in
this file runs turns through the API; a tool the provider ran itself is shown and persisted,
never run by the loop; a cost the provider reports is the call's cost, flagged and settled
through the budget ledger; a provider's per-thread state survives turns and a restart."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from decimal import Decimal
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from ator.engine.wire import delta
from ator.errors import ValidationFailed
from ator.providers.base import (
    MessageStop,
    ModelRequest,
    NativeToolCall,
    NativeToolResult,
    StreamEvent,
    TextDelta,
    Usage,
)
from ator.providers.config import ProviderConfig
from ator.providers.factory import ProviderFactory
from ator.store import model_calls as call_store
from ator.tools.base import Tool, ToolContext
from tests.conftest import ended, new_thread, operator_client, wait_for_event


class GreeterConfig(ProviderConfig):
    """This provider's own config model: one key, typed (extra keys refused)."""

    greeting: str = "hello"


class Greeter:
    """Answers every request with its greeting and the last user text."""

    name = "greeter"

    def __init__(self, greeting: str) -> None:
        self.greeting = greeting

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        last = request.messages[-1]["content"][-1].get("text", "")
        yield TextDelta(f"{self.greeting}, {last}")
        yield MessageStop("end_turn", Usage(3, 4), request.model)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_a_provider_registered_by_factory_runs_a_turn_through_the_api(make_ator: Any
                                                                             ) -> None:
    factory = ProviderFactory.of("greeter", lambda c: Greeter(str(c.get("greeting", "hello"))),
                                 config=GreeterConfig, default_model="greeter-1")
    async with operator_client(make_ator) as (client, key, runtime):
        assert "greeter" not in runtime.providers.known()
        runtime.providers.register_factory(factory)
        assert "greeter" in runtime.providers.known()
        # Its config model is the one that judges a setup: a key it does not know is a 422.
        bad = await client.post("/v1/setups", headers=auth(key), json={
            "name": "g", "provider": "greeter", "model": "greeter-1",
            "config": {"greeting": "hi", "colour": "red"}})
        assert bad.status_code == 422 and bad.json()["code"] == "invalid_config", bad.text
        made = await client.post("/v1/setups", headers=auth(key), json={
            "name": "g", "provider": "greeter", "model": "greeter-1",
            "config": {"greeting": "Good day"}})
        assert made.status_code == 201, made.text
        thread = (await client.post("/v1/threads", headers=auth(key),
                                    json={"setup_id": made.json()["id"]})).json()
        sent = await client.post(f"/v1/threads/{thread['id']}/messages", headers=auth(key),
                                 json={"text": "Ada"})
        assert sent.status_code == 202, sent.text
        end = await _turn_end(client, key, thread["id"])
        assert end["data"]["status"] == "done"
        events = (await client.get(f"/v1/threads/{thread['id']}/events",
                                   headers=auth(key))).json()["data"]
        replies = [f["data"] for f in events if f["type"] == "assistant"]
        assert replies[-1]["data"]["content"] == [{"type": "text", "text": "Good day, Ada"}]
        # A name nobody registered is still refused, naming the ones that are.
        unknown = await client.post("/v1/setups", headers=auth(key), json={
            "name": "x", "provider": "nobody", "model": "m"})
        assert unknown.status_code == 422 and unknown.json()["code"] == "unknown_provider"
        assert "greeter" in unknown.json()["detail"]


async def _turn_end(client: httpx.AsyncClient, key: str, thread_id: str) -> dict[str, Any]:
    seq = 0
    for _ in range(60):
        got = (await client.get(f"/v1/threads/{thread_id}/events", headers=auth(key),
                                params={"after_seq": seq, "wait": 5})).json()
        for event in (frame["data"] for frame in got["data"]):  # frames (engine.wire)
            if event["kind"] == "turn_ended":
                return dict(event)
        seq = got["last_seq"]
    raise AssertionError("the turn did not end")


class SelfRunning:
    """A provider that runs a `lookup` tool itself, says so in its stream, then answers and
    reports what the call cost it."""

    name = "self-running"

    def __init__(self, cost: Decimal) -> None:
        self.cost = cost
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        yield NativeToolCall("srv_1", "lookup", {"q": "weather"})
        yield NativeToolResult("srv_1", "sunny, 21C")
        yield TextDelta("It is sunny.")
        yield MessageStop("end_turn", Usage(1000, 200), request.model, cost_usd=self.cost)


async def test_a_tool_the_provider_ran_is_shown_and_never_run_and_its_cost_is_billed(
    make_ator: Any,
) -> None:
    ran: list[dict[str, Any]] = []

    async def lookup(args: dict[str, Any], ctx: ToolContext) -> str:
        ran.append(args)
        return "from the loop"

    # A native tool of the same name: the loop must not run it for the provider's call.
    tool = Tool("lookup", "look up", {"type": "object", "properties": {}}, lookup)
    provider = SelfRunning(Decimal("0.123456"))
    async with make_ator(providers={"self-running": provider}, tools=[tool]) as ator:
        # A priced model name: the provider's figure must win over the catalog's.
        scope, thread = await new_thread(ator, "self-running", model="claude-haiku-4-5",
                                         budget=Decimal("5"))
        await ator.submit(scope, thread.id, "weather?", client_message_id="m1")
        end = await wait_for_event(ator, scope, thread.id, ended)
        assert end.data["status"] == "done", end.data
        events = await ator.events(scope, thread.id)
        [reply] = [e for e in events if e.kind == "assistant"]
        assert reply.data["content"] == [
            {"type": "native_tool_call", "id": "srv_1", "name": "lookup",
             "input": {"q": "weather"}},
            {"type": "native_tool_result", "tool_use_id": "srv_1", "content": "sunny, 21C",
             "is_error": False},
            {"type": "text", "text": "It is sunny."},
        ]
        assert ran == [] and not [e for e in events if e.kind == "tool_results"]
        assert len(provider.requests) == 1  # no second call to answer a tool_use
        # Exactly the provider's figure, flagged as its own, on the call and on the turn.
        assert Decimal(end.data["cost_usd"]) == Decimal("0.123456")
        assert end.data["cost_source"] == "provider"
        calls = await call_store.turn_calls(ator.db, scope, uuid.UUID(end.data["turn_id"]))
        [call] = calls.calls
        assert (call.cost_usd, call.cost_source, call.priced) == (
            Decimal("0.123456"), "provider", True)
        # Through the ledger's settle: the org's month holds the cost, no reservation left.
        month = await ator.db.read(sa.text(
            "SELECT sum(cost_usd) AS usd, sum(reserved_usd) AS reserved FROM org_usage "
            "WHERE org_id = :org"), {"org": scope.org_id})
        assert (month[0].usd, month[0].reserved) == (Decimal("0.123456"), Decimal(0))
        # The next turn's history keeps the provider's own blocks out of what is sent.
        await ator.submit(scope, thread.id, "and tomorrow?", client_message_id="m2")
        await wait_for_event(ator, scope, thread.id, ended, after_seq=end.seq)
        sent = [b["type"] for m in provider.requests[-1].messages for b in m["content"]]
        assert "native_tool_call" not in sent and "native_tool_result" not in sent


async def test_a_catalog_priced_call_says_so(make_ator: Any) -> None:
    class Plain(SelfRunning):
        async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
            yield TextDelta("ok")
            yield MessageStop("end_turn", Usage(1000, 200), request.model)

    async with make_ator(providers={"plain": Plain(Decimal(0))}) as ator:
        scope, thread = await new_thread(ator, "plain", model="claude-haiku-4-5")
        await ator.submit(scope, thread.id, "hi", client_message_id="m1")
        end = await wait_for_event(ator, scope, thread.id, ended)
        assert end.data["cost_source"] == "catalog" and Decimal(end.data["cost_usd"]) > 0
        scope2, thread2 = await new_thread(ator, "plain", model="no-such-model-anywhere")
        await ator.submit(scope2, thread2.id, "hi", client_message_id="m1")
        end2 = await wait_for_event(ator, scope2, thread2.id, ended)
        assert end2.data["cost_source"] == "unpriced" and Decimal(end2.data["cost_usd"]) == 0


class Resumable:
    """A provider that keeps a session per thread (what a CLI runtime's `--resume` needs):
    it records the state it is handed and returns the next one."""

    name = "resumable"

    def __init__(self) -> None:
        self.seen: list[Mapping[str, Any] | None] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.seen.append(request.session)
        n = int(request.session["n"]) + 1 if request.session else 1
        yield TextDelta(f"call {n}")
        yield MessageStop("end_turn", Usage(1, 1), request.model,
                          session={"session_id": f"cli-{n}", "n": n})


async def test_a_provider_sees_the_state_it_returned_last_turn_also_after_a_restart(
    make_ator: Any,
) -> None:
    first = Resumable()
    async with make_ator() as ator:
        ator.providers.register_factory(ProviderFactory.instance("resumable", first,
                                                                 sessions=True))
        scope, thread = await new_thread(ator, "resumable")
        other_scope, other = await new_thread(ator, "resumable")
        seq = 0
        for i in (1, 2):
            await ator.submit(scope, thread.id, f"m{i}", client_message_id=f"m{i}")
            end = await wait_for_event(ator, scope, thread.id, ended, after_seq=seq)
            seq = end.seq
        assert first.seen == [None, {"session_id": "cli-1", "n": 1}]
        # The state is the thread's: a new thread of the same provider starts without one.
        await ator.submit(other_scope, other.id, "hi", client_message_id="o1")
        await wait_for_event(ator, other_scope, other.id, ended)
        assert first.seen[-1] is None
    # A new engine on the same database: the state comes from PostgreSQL, not memory.
    second = Resumable()
    async with make_ator() as ator:
        ator.providers.register_factory(ProviderFactory.instance("resumable", second,
                                                                 sessions=True))
        await ator.submit(scope, thread.id, "m3", client_message_id="m3")
        await wait_for_event(ator, scope, thread.id, ended, after_seq=end.seq)
        assert second.seen == [{"session_id": "cli-2", "n": 2}]
        # The state is never shown: not in the events, not in the stream.
        events = await ator.events(scope, thread.id)
        assert not any("cli-" in str(e.data) for e in events)


def test_the_live_stream_shows_a_provider_run_tool_and_never_its_session() -> None:
    turn = uuid.uuid4()
    call = delta(turn, NativeToolCall("srv_1", "lookup", {"q": "x"}))
    result = delta(turn, NativeToolResult("srv_1", "found"))
    assert (call["type"], call["name"], call["input"], call["ephemeral"]) == (
        "NativeToolCall", "lookup", {"q": "x"}, True)
    assert (result["type"], result["content"]) == ("NativeToolResult", "found")
    stop = delta(turn, MessageStop("end_turn", Usage(1, 1), "m", cost_usd=Decimal("0.5"),
                                         session={"session_id": "secret-ish"}))
    assert "session" not in stop and "usage" not in stop and stop["cost_usd"] == Decimal("0.5")


async def test_a_scripted_setup_can_play_a_provider_run_tool_and_a_reported_cost(
    make_ator: Any,
) -> None:
    script = [{"native_tool_calls": [{"name": "web_search", "input": {"q": "ator"},
                                      "result": "3 results"}],
               "text": "Found it.", "cost_usd": "0.0125"}]
    async with make_ator() as ator:
        scope, thread = await new_thread(ator, "scripted", model="claude-haiku-4-5",
                                         config={"script": script})
        await ator.submit(scope, thread.id, "look", client_message_id="m1")
        end = await wait_for_event(ator, scope, thread.id, ended)
        assert end.data["status"] == "done"
        assert (Decimal(end.data["cost_usd"]), end.data["cost_source"]) == (
            Decimal("0.0125"), "provider")
        [reply] = [e for e in await ator.events(scope, thread.id) if e.kind == "assistant"]
        assert [b["type"] for b in reply.data["content"]] == [
            "native_tool_call", "native_tool_result", "text"]
        with pytest.raises(ValidationFailed):  # a cost is a decimal string, checked at write
            await ator.create_setup(scope, name="bad", provider="scripted", model="m",
                                    config={"script": [{"cost_usd": "a lot"}]})
