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
from ator.engine.approvals_extension import ApprovalPolicy
from ator.errors import Conflict, NotFound, ValidationFailed
from ator.store.scope import Scope
from ator.tools.base import Tool, ToolContext
from tests.approval_bank import (
    Bank,
    agents_for_bank,
    assert_every_tool_use_answered,
    held,
    mark_end,
    next_end,
    results,
    thread_for,
)
from tests.conftest import REDIS_URL
from tests.subagent_agents import Agents, Reply


async def test_a_gated_call_waits_and_approving_on_another_replica_runs_it_once(
    make_ator, tmp_path: Path,
) -> None:
    bank, agents = Bank(), agents_for_bank()
    prefix = f"ator-test-appr-{os.getpid()}-{id(tmp_path)}:"
    async with make_ator(providers={"agents": agents}, tools=bank.tools(),
                         redis_url=REDIS_URL, redis_prefix=prefix) as a, \
            make_ator(providers={"agents": agents}, tools=bank.tools(),
                      redis_url=REDIS_URL, redis_prefix=prefix) as b:
        scope, thread = await thread_for(a)
        action = await held(a, scope, thread.id)
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
        end = await next_end(a, scope, thread.id)
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
    bank, agents = Bank(), agents_for_bank()
    prefix = f"ator-test-appr-race-{os.getpid()}-{id(tmp_path)}:"
    async with make_ator(providers={"agents": agents}, tools=bank.tools(),
                         redis_url=REDIS_URL, redis_prefix=prefix) as a, \
            make_ator(providers={"agents": agents}, tools=bank.tools(),
                      redis_url=REDIS_URL, redis_prefix=prefix) as b:
        scope, thread = await thread_for(a)
        action = await held(a, scope, thread.id)
        outcomes = await asyncio.gather(
            a.service(Approvals).decide(scope, action.id, uuid.uuid4(), Decision(True)),
            b.service(Approvals).decide(scope, action.id, uuid.uuid4(), Decision(True)),
            return_exceptions=True)
        won = [o for o in outcomes if not isinstance(o, BaseException)]
        lost = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(won) == 1 and len(lost) == 1
        assert isinstance(lost[0], Conflict) and lost[0].code == "approval_decided"
        end = await next_end(a, scope, thread.id)
        assert end.data["status"] == "done"
        assert bank.transfers == [5]
        assert_every_tool_use_answered(agents)


async def test_a_denial_reaches_the_model_as_an_error_result_with_the_reason(
    make_ator,
) -> None:
    bank, agents = Bank(), agents_for_bank()
    async with make_ator(providers={"agents": agents}, tools=bank.tools()) as a:
        scope, thread = await thread_for(a)
        action = await held(a, scope, thread.id)
        await a.service(Approvals).decide(scope, action.id, uuid.uuid4(),
                                          Decision(False, reason="not this month"))
        end = await next_end(a, scope, thread.id)
        assert end.data["status"] == "done"
        assert bank.transfers == []
        last = agents.requests[-1]
        denied = [r for r in results(last) if r["is_error"]]
        assert len(denied) == 1 and "not this month" in denied[0]["content"]
        assert_every_tool_use_answered(agents)
        audited = await a.service(Approvals).get(scope, action.id)
        assert (audited.status, audited.reason) == ("denied", "not this month")


async def test_an_unanswered_call_expires_as_a_denial_by_timeout(make_ator) -> None:
    bank, agents = Bank(), agents_for_bank()
    async with make_ator(providers={"agents": agents}, tools=bank.tools(),
                         job_poll_interval=0.2) as a:
        await a.start_jobs()
        scope, thread = await thread_for(a, timeout=0.5)
        action = await held(a, scope, thread.id)
        end = await next_end(a, scope, thread.id)
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
    bank, agents = Bank(), agents_for_bank()
    async with make_ator(providers={"agents": agents}, tools=bank.tools()) as a:
        scope, thread = await thread_for(a)
        action = await held(a, scope, thread.id)
        approvals = a.service(Approvals)
        with pytest.raises(ValidationFailed) as bad:
            await approvals.decide(scope, action.id, uuid.uuid4(),
                                   Decision(True, arguments={"amount": "lots"}))
        assert bad.value.code == "invalid_arguments"
        assert (await approvals.get(scope, action.id)).status == "pending"
        done = await approvals.decide(scope, action.id, uuid.uuid4(),
                                      Decision(True, arguments={"amount": 3}))
        assert (done.arguments, done.decided_arguments) == ({"amount": 5}, {"amount": 3})
        await next_end(a, scope, thread.id)
        assert bank.transfers == [3]


async def test_a_user_message_before_the_decision_keeps_the_history_valid(make_ator) -> None:
    bank, agents = Bank(), agents_for_bank()
    async with make_ator(providers={"agents": agents}, tools=bank.tools()) as a:
        scope, thread = await thread_for(a)
        action = await held(a, scope, thread.id)
        await a.ask(scope, thread.id, "still there?", timeout=30)
        assert_every_tool_use_answered(agents)
        mark_end(thread.id, [e for e in await a.events(scope, thread.id)
                             if e.kind == "turn_ended"][-1].seq)
        await a.service(Approvals).decide(scope, action.id, uuid.uuid4(), Decision(True))
        end = await next_end(a, scope, thread.id)
        assert end.data["status"] == "done"
        assert bank.transfers == [5]
        texts = [b.get("text", "") for m in agents.requests[-1].messages
                 for b in m["content"] if b.get("type") == "text"]
        assert any("was decided and ran" in t and "moved 5" in t for t in texts)
        assert_every_tool_use_answered(agents)


async def test_another_orgs_action_is_not_found(make_ator) -> None:
    bank, agents = Bank(), agents_for_bank()
    async with make_ator(providers={"agents": agents}, tools=bank.tools()) as a:
        scope, thread = await thread_for(a)
        action = await held(a, scope, thread.id)
        other = Scope((await a.create_org("other")).id)
        with pytest.raises(NotFound):
            await a.service(Approvals).decide(other, action.id, uuid.uuid4(), Decision(True))
        assert (await a.service(Approvals).pending(other)).actions == []
        assert bank.transfers == []


def test_the_policy_gates_by_glob_and_org_gates_mcp_tools_not_marked_read_only() -> None:
    async def nothing(args: dict[str, Any], ctx: ToolContext) -> str:
        return ""

    def tool(name: str, origin: str = "native", read_only: bool = False) -> Tool:
        return Tool(name, "", {"type": "object"}, nothing, origin=origin, read_only=read_only)

    assert ApprovalPolicy.build({"approve": None, "mcp_writes": None}) is None
    by_glob = ApprovalPolicy.build({"approve": ["docs__write_*"], "timeout": 60})
    assert by_glob is not None and by_glob.timeout == 60.0
    assert by_glob.requires(tool("docs__write_page", "mcp:docs"))
    assert not by_glob.requires(tool("docs__read_page", "mcp:docs"))
    org = ApprovalPolicy.build({"mcp_writes": True})
    assert org is not None
    assert org.requires(tool("docs__read_page", "mcp:docs"))  # no readOnlyHint
    assert not org.requires(tool("docs__search", "mcp:docs", read_only=True))
    assert not org.requires(tool("calculator"))  # native tools: only by the setup's globs


async def test_an_approval_whose_replica_died_before_delivering_is_answered_as_lost(
    make_ator,
) -> None:
    from ator.store import approvals as approval_store

    bank, agents = Bank(), agents_for_bank()
    async with make_ator(providers={"agents": agents}, tools=bank.tools(),
                         job_poll_interval=0.2) as a:
        a.service(Approvals).run_grace = 0.0
        scope, thread = await thread_for(a, timeout=0.5)
        action = await held(a, scope, thread.id)
        # A replica claimed the approval, then stopped before running or delivering it.
        claimed = await approval_store.decide(
            a.db, scope, action.id, status="approved", by=uuid.uuid4(), reason=None,
            decided_arguments=None, content=None)
        assert claimed is not None and claimed.result is None
        await a.start_jobs()
        end = await next_end(a, scope, thread.id)
        assert end.data["status"] == "done"
        assert bank.transfers == []  # never run twice: here, not run at all
        lost = [r for r in results(agents.requests[-1]) if r["is_error"]]
        assert len(lost) == 1 and "stopped before it reported" in lost[0]["content"]
        assert (await a.service(Approvals).get(scope, action.id)).result is not None
        assert_every_tool_use_answered(agents)


async def test_an_org_that_gates_mcp_writes_holds_a_real_mcp_tool_without_read_only_hint(
    make_ator,
) -> None:
    """A real MCP SDK server: `docs__write` (no readOnlyHint) is held, `docs__echo` (read
    only) runs at once; the approval runs `write` on the server exactly once."""
    from ator.engine.mcp import McpServers
    from tests.mcp_servers import ServerState, demo_server, serve_mcp

    def mcp_model(request: Any) -> Reply:
        found = results(request)
        if not found:
            return Reply(calls=[("docs__echo", {"text": "hi"}), ("docs__write", {"value": "v"})])
        return Reply(text="result: " + " | ".join(str(r["content"]) for r in found))

    state = ServerState()
    agents = Agents(mcp_model, lambda task, r: Reply(text="-"))
    async with make_ator(providers={"agents": agents}, egress_allow=("127.0.0.1",)) as a, \
            serve_mcp(demo_server(state=state)) as url:
        org = await a.create_org(f"org-{uuid.uuid4().hex[:6]}")
        scope = Scope(org.id)
        await a.service(Approvals).set_settings(scope, approve_mcp_writes=True)
        await a.service(McpServers).create_mcp_server(scope, name="docs", transport="http",
                                                      url=url)
        setup = await a.create_setup(scope, name="s", provider="agents", model="scripted")
        thread = await a.create_thread(scope, setup.id)
        result = await a.ask(scope, thread.id, "write it", timeout=30)
        assert result.status == "waiting"
        [action] = (await a.service(Approvals).pending(scope)).actions
        assert (action.name, action.subject["origin"]) == ("docs__write", "mcp:docs")
        assert state.calls == {"echo": 1}
        mark_end(thread.id, [e for e in await a.events(scope, thread.id)
                             if e.kind == "turn_ended"][-1].seq)
        await a.service(Approvals).decide(scope, action.id, uuid.uuid4(), Decision(True))
        end = await next_end(a, scope, thread.id)
        assert end.data["status"] == "done"
        assert state.calls == {"echo": 1, "write": 1}
        assert "wrote v" in str(results(agents.requests[-1]))
        assert_every_tool_use_answered(agents)


async def test_the_setup_policy_refuses_a_bad_approve_list_or_timeout(make_ator) -> None:
    async with make_ator(providers={"agents": agents_for_bank()}, engine=False) as a:
        scope = Scope((await a.create_org("policy")).id)
        for policy in ({"approve": "transfer"}, {"approve": ["bad name"]},
                       {"approve_timeout": 0}, {"approve_timeout": 31 * 86_400},
                       {"approve_later": []}):
            with pytest.raises(ValidationFailed) as refused:
                await a.create_setup(scope, name="s", provider="agents", model="scripted",
                                     tool_policy=policy)
            assert refused.value.code == "invalid_tool_policy", policy
        ok = await a.create_setup(scope, name="s", provider="agents", model="scripted",
                                  tool_policy={"approve": ["docs__*"], "approve_timeout": 60})
        assert ok.tool_policy["approve"] == ["docs__*"]


async def test_a_change_of_the_mcp_write_gate_counts_at_once_here_and_within_the_ttl_elsewhere(
        make_ator) -> None:
    # Two replicas on one database: the gateway's read of the gate is kept per org for the
    # catalog's TTL, dropped at once by a change made through the same replica.
    async with make_ator(engine=False, mcp_catalog_ttl=1.0) as a, \
            make_ator(engine=False, mcp_catalog_ttl=1.0) as b:
        scope = Scope((await a.create_org(f"org-{uuid.uuid4().hex[:6]}")).id)
        here, there = a.service(Approvals), b.service(Approvals)
        assert not await here.gates_mcp_writes(scope)
        assert not await there.gates_mcp_writes(scope)
        await here.set_settings(scope, approve_mcp_writes=True)
        assert await here.gates_mcp_writes(scope)
        await asyncio.sleep(1.1)  # past the TTL: the other replica reads it again
        assert await there.gates_mcp_writes(scope)
        await there.set_settings(scope, approve_mcp_writes=False)
        assert not await there.gates_mcp_writes(scope)
