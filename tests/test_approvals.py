"""Tool approvals: a gated call is held (turn `waiting`, one pending action), a person's
decision on any replica runs it once or denies it, and the conversation goes on with a result
— never a tool_use without one. Real PostgreSQL, real Redis for two replicas."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from ator.engine.approvals import Approvals, Decision
from ator.errors import Conflict, NotFound, ValidationFailed
from ator.providers.base import ModelRequest
from ator.store.scope import Scope
from ator.tools.base import Tool, ToolContext
from tests.conftest import REDIS_URL, wait_for_event
from tests.subagent_agents import Agents, Reply

TRANSFER_SCHEMA = {"type": "object", "properties": {"amount": {"type": "integer"}},
                   "required": ["amount"], "additionalProperties": False}


class Bank:
    """A gated tool (`transfer`) and a free one (`balance`), counting what really ran."""

    def __init__(self) -> None:
        self.transfers: list[int] = []

    def tools(self) -> list[Tool]:
        async def transfer(args: dict[str, Any], ctx: ToolContext) -> str:
            self.transfers.append(int(args["amount"]))
            return f"moved {args['amount']}"

        async def balance(args: dict[str, Any], ctx: ToolContext) -> str:
            return "balance 100"

        return [Tool("transfer", "Move money", TRANSFER_SCHEMA, transfer),
                Tool("balance", "Read the balance", {"type": "object"}, balance,
                     read_only=True)]


def results(request: ModelRequest) -> list[dict[str, Any]]:
    return [b for m in request.messages if m["role"] == "user" for b in m["content"]
            if b.get("type") == "tool_result"]


def model(request: ModelRequest) -> Reply:
    """Calls `transfer` (and `balance`) once; after results, says what it read."""
    found = results(request)
    if not found:
        return Reply(text="moving", calls=[("balance", {}), ("transfer", {"amount": 5})])
    return Reply(text="result: " + " | ".join(str(r["content"]) for r in found))


def assert_every_tool_use_answered(agents: Agents) -> None:
    """The invariant: in every request sent, each tool_use is answered in the next message."""
    assert agents.requests
    for request in agents.requests:
        msgs = request.messages
        for i, m in enumerate(msgs):
            uses = [b["id"] for b in m["content"] if b.get("type") == "tool_use"]
            if not uses:
                continue
            assert i + 1 < len(msgs) and msgs[i + 1]["role"] == "user", "tool_use unanswered"
            answered = {b["tool_use_id"] for b in msgs[i + 1]["content"]
                        if b.get("type") == "tool_result"}
            assert set(uses) <= answered


async def _thread(ator: Any, *, timeout: float | None = None) -> tuple[Scope, Any]:
    org = await ator.create_org(f"org-{uuid.uuid4().hex[:6]}")
    scope = Scope(org.id)
    policy: dict[str, Any] = {"approve": ["transfer"]}
    if timeout is not None:
        policy["approve_timeout"] = timeout
    setup = await ator.create_setup(scope, name="s", provider="agents", model="scripted",
                                    tool_policy=policy)
    return scope, await ator.create_thread(scope, setup.id)


async def _held(ator: Any, scope: Scope, thread_id: uuid.UUID) -> Any:
    """Ask, check the turn ended `waiting` with exactly one pending action; return it (and
    remember the seq of that turn's end, for `_next_end`)."""
    result = await ator.ask(scope, thread_id, "pay five", timeout=30)
    assert (result.status, result.stop_reason) == ("waiting", "held")
    page = await ator.service(Approvals).pending(scope)
    assert len(page.actions) == 1
    action = page.actions[0]
    assert (action.name, action.arguments, action.status) == ("transfer", {"amount": 5},
                                                              "pending")
    events = await ator.events(scope, thread_id)
    _LAST_END[thread_id] = [e for e in events if e.kind == "turn_ended"][-1].seq
    return action


_LAST_END: dict[uuid.UUID, int] = {}


async def _next_end(ator: Any, scope: Scope, thread_id: uuid.UUID) -> Any:
    """The end of the first turn after the latest `_held` one."""
    return await wait_for_event(ator, scope, thread_id, lambda e: e.kind == "turn_ended",
                                after_seq=_LAST_END[thread_id])


def _agents() -> Agents:
    return Agents(model, lambda task, r: Reply(text="no children here"))


async def test_a_gated_call_waits_and_approving_on_another_replica_runs_it_once(
    make_ator, tmp_path: Path,
) -> None:
    bank, agents = Bank(), _agents()
    prefix = f"ator-test-appr-{os.getpid()}-{id(tmp_path)}:"
    async with make_ator(providers={"agents": agents}, tools=bank.tools(),
                         redis_url=REDIS_URL, redis_prefix=prefix) as a, \
            make_ator(providers={"agents": agents}, tools=bank.tools(),
                      redis_url=REDIS_URL, redis_prefix=prefix) as b:
        scope, thread = await _thread(a)
        action = await _held(a, scope, thread.id)
        assert bank.transfers == []  # held: not run
        events = await a.events(scope, thread.id)
        ended = [e for e in events if e.kind == "turn_ended"][-1]
        assert ended.data["held"][0]["action_id"] == str(action.id)
        # the free call ran in the same step
        assert [r["name"] for e in events if e.kind == "tool_results"
                for r in e.data["results"]] == ["balance"]
        assert not a.actor.running  # the thread is idle

        by = uuid.uuid4()
        decided = await b.service(Approvals).decide(scope, action.id, by, Decision(True))
        assert decided.status == "approved" and decided.decided_by == by
        end = await _next_end(a, scope, thread.id)
        assert end.data["status"] == "done"
        assert bank.transfers == [5]
        final = [e for e in await a.events(scope, thread.id) if e.kind == "assistant"][-1]
        text = "".join(blk.get("text", "") for blk in final.data["content"])
        assert "moved 5" in text and "balance 100" in text
        assert_every_tool_use_answered(agents)
        audited = await a.service(Approvals).get(scope, action.id)
        assert audited.result is not None and audited.result["content"].endswith("moved 5")
        assert audited.executed_at is not None and audited.decided_at is not None
        with pytest.raises(Conflict) as again:
            await a.service(Approvals).decide(scope, action.id, by, Decision(False))
        assert again.value.code == "approval_decided"
        assert bank.transfers == [5]


@pytest.mark.parametrize("run", range(3))
async def test_two_people_deciding_at_once_on_two_replicas_yield_one_execution(
    make_ator, tmp_path: Path, run: int,
) -> None:
    bank, agents = Bank(), _agents()
    prefix = f"ator-test-appr-race-{os.getpid()}-{id(tmp_path)}:"
    async with make_ator(providers={"agents": agents}, tools=bank.tools(),
                         redis_url=REDIS_URL, redis_prefix=prefix) as a, \
            make_ator(providers={"agents": agents}, tools=bank.tools(),
                      redis_url=REDIS_URL, redis_prefix=prefix) as b:
        scope, thread = await _thread(a)
        action = await _held(a, scope, thread.id)
        outcomes = await asyncio.gather(
            a.service(Approvals).decide(scope, action.id, uuid.uuid4(), Decision(True)),
            b.service(Approvals).decide(scope, action.id, uuid.uuid4(), Decision(True)),
            return_exceptions=True)
        won = [o for o in outcomes if not isinstance(o, BaseException)]
        lost = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(won) == 1 and len(lost) == 1
        assert isinstance(lost[0], Conflict) and lost[0].code == "approval_decided"
        end = await _next_end(a, scope, thread.id)
        assert end.data["status"] == "done"
        assert bank.transfers == [5]
        assert_every_tool_use_answered(agents)


async def test_a_denial_reaches_the_model_as_an_error_result_with_the_reason(
    make_ator,
) -> None:
    bank, agents = Bank(), _agents()
    async with make_ator(providers={"agents": agents}, tools=bank.tools()) as a:
        scope, thread = await _thread(a)
        action = await _held(a, scope, thread.id)
        await a.service(Approvals).decide(scope, action.id, uuid.uuid4(),
                                          Decision(False, reason="not this month"))
        end = await _next_end(a, scope, thread.id)
        assert end.data["status"] == "done"
        assert bank.transfers == []
        last = agents.requests[-1]
        denied = [r for r in results(last) if r["is_error"]]
        assert len(denied) == 1 and "not this month" in denied[0]["content"]
        assert_every_tool_use_answered(agents)
        audited = await a.service(Approvals).get(scope, action.id)
        assert (audited.status, audited.reason) == ("denied", "not this month")


async def test_an_unanswered_call_expires_as_a_denial_by_timeout(make_ator) -> None:
    bank, agents = Bank(), _agents()
    async with make_ator(providers={"agents": agents}, tools=bank.tools(),
                         job_poll_interval=0.2) as a:
        await a.start_jobs()
        scope, thread = await _thread(a, timeout=0.5)
        action = await _held(a, scope, thread.id)
        end = await _next_end(a, scope, thread.id)
        assert end.data["status"] == "done"
        assert bank.transfers == []
        timed_out = [r for r in results(agents.requests[-1]) if r["is_error"]]
        assert len(timed_out) == 1 and "timeout" in timed_out[0]["content"]
        assert (await a.service(Approvals).get(scope, action.id)).status == "expired"
        with pytest.raises(Conflict):
            await a.service(Approvals).decide(scope, action.id, uuid.uuid4(), Decision(True))
        assert_every_tool_use_answered(agents)


async def test_approving_with_edited_arguments_revalidates_and_runs_the_edit(
    make_ator,
) -> None:
    bank, agents = Bank(), _agents()
    async with make_ator(providers={"agents": agents}, tools=bank.tools()) as a:
        scope, thread = await _thread(a)
        action = await _held(a, scope, thread.id)
        approvals = a.service(Approvals)
        with pytest.raises(ValidationFailed) as bad:
            await approvals.decide(scope, action.id, uuid.uuid4(),
                                   Decision(True, arguments={"amount": "lots"}))
        assert bad.value.code == "invalid_arguments"
        assert (await approvals.get(scope, action.id)).status == "pending"
        done = await approvals.decide(scope, action.id, uuid.uuid4(),
                                      Decision(True, arguments={"amount": 3}))
        assert (done.arguments, done.decided_arguments) == ({"amount": 5}, {"amount": 3})
        await _next_end(a, scope, thread.id)
        assert bank.transfers == [3]


async def test_a_user_message_before_the_decision_keeps_the_history_valid(make_ator) -> None:
    bank, agents = Bank(), _agents()
    async with make_ator(providers={"agents": agents}, tools=bank.tools()) as a:
        scope, thread = await _thread(a)
        action = await _held(a, scope, thread.id)
        await a.ask(scope, thread.id, "still there?", timeout=30)
        assert_every_tool_use_answered(agents)
        _LAST_END[thread.id] = [e for e in await a.events(scope, thread.id)
                                if e.kind == "turn_ended"][-1].seq
        await a.service(Approvals).decide(scope, action.id, uuid.uuid4(), Decision(True))
        end = await _next_end(a, scope, thread.id)
        assert end.data["status"] == "done"
        assert bank.transfers == [5]
        texts = [b.get("text", "") for m in agents.requests[-1].messages
                 for b in m["content"] if b.get("type") == "text"]
        assert any("was decided and ran" in t and "moved 5" in t for t in texts)
        assert_every_tool_use_answered(agents)


async def test_another_orgs_action_is_not_found(make_ator) -> None:
    bank, agents = Bank(), _agents()
    async with make_ator(providers={"agents": agents}, tools=bank.tools()) as a:
        scope, thread = await _thread(a)
        action = await _held(a, scope, thread.id)
        other = Scope((await a.create_org("other")).id)
        with pytest.raises(NotFound):
            await a.service(Approvals).decide(other, action.id, uuid.uuid4(), Decision(True))
        assert (await a.service(Approvals).pending(other)).actions == []
        assert bank.transfers == []
