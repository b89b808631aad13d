"""The bank the approval tests play with (layer: tests): a gated tool (`transfer`) and a free
one (`balance`) that count what really ran, a model that calls both once and then says what
it read, and helpers to reach a held call and the turn after its decision."""

from __future__ import annotations

import uuid
from typing import Any

from ator.engine.approvals import Approvals
from ator.providers.base import ModelRequest
from ator.store.scope import Scope
from ator.tools.base import Tool, ToolContext
from tests.conftest import wait_for_event
from tests.subagent_agents import Agents, Reply

__all__ = ["Bank", "agents_for_bank", "assert_every_tool_use_answered", "held", "mark_end",
           "next_end", "results", "thread_for"]

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


async def thread_for(ator: Any, *, timeout: float | None = None) -> tuple[Scope, Any]:
    org = await ator.create_org(f"org-{uuid.uuid4().hex[:6]}")
    scope = Scope(org.id)
    policy: dict[str, Any] = {"approve": ["transfer"]}
    if timeout is not None:
        policy["approve_timeout"] = timeout
    setup = await ator.create_setup(scope, name="s", provider="agents", model="scripted",
                                    tool_policy=policy)
    return scope, await ator.create_thread(scope, setup.id)


async def held(ator: Any, scope: Scope, thread_id: uuid.UUID) -> Any:
    """Ask, check the turn ended `waiting` with exactly one pending action; return it (and
    remember the seq of that turn's end, for `next_end`)."""
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


def mark_end(thread_id: uuid.UUID, seq: int) -> None:
    """`next_end` waits for a turn ending after `seq`."""
    _LAST_END[thread_id] = seq


async def next_end(ator: Any, scope: Scope, thread_id: uuid.UUID) -> Any:
    """The end of the first turn after the latest `held` one."""
    return await wait_for_event(ator, scope, thread_id, lambda e: e.kind == "turn_ended",
                                after_seq=_LAST_END[thread_id])


def agents_for_bank() -> Agents:
    return Agents(model, lambda task, r: Reply(text="no children here"))
