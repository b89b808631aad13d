"""Agents and workflows on real PostgreSQL with the jobs worker in this process: an agent
starts a workflow with a tool and is told its result once, in a later turn, wrapped as data;
a run it cancels reports `cancelled`; a run another conversation started cannot be cancelled
from here; the tools' budget can only lower the recipe's."""

from __future__ import annotations

import re
import uuid
from decimal import Decimal
from typing import Any

from ator import Scope
from ator.jobs import JobContext
from ator.providers.base import ModelRequest
from ator.workflows import Workflows
from ator.workflows.told import RunTeller
from tests.conftest import new_thread, wait_for_event
from tests.subagent_agents import Agents, Reply

_RESULT = re.compile(r"<workflow_result [^>]*>")


def results_in(request: ModelRequest) -> list[str]:
    return [tag for m in request.messages for b in m["content"] if b.get("type") == "text"
            for tag in _RESULT.findall(str(b["text"]))]


def tool_results(request: ModelRequest) -> list[str]:
    return [str(b.get("content")) for m in request.messages for b in m["content"]
            if b.get("type") == "tool_result"]


def unanswered_calls(request: ModelRequest) -> list[str]:
    """Tool calls the request carries without their result (there must be none)."""
    used = [b["id"] for m in request.messages for b in m["content"]
            if b.get("type") == "tool_use"]
    answered = {b.get("tool_use_id") for m in request.messages for b in m["content"]
                if b.get("type") == "tool_result"}
    return [u for u in used if u not in answered]


def last_user_text(request: ModelRequest) -> str:
    for block in request.messages[-1]["content"]:
        if block.get("type") == "text":
            return str(block["text"])
    return ""


async def publish(ator: Any, scope: Scope, name: str, recipe: dict[str, Any]) -> None:
    flows = ator.service(Workflows)
    wf = await flows.create(scope, name)
    await flows.publish(scope, wf["id"], recipe)


async def workflow_notices(ator: Any, scope: Scope, thread_id: uuid.UUID) -> list[Any]:
    return [e for e in await ator.events(scope, thread_id, limit=1000)
            if e.kind == "notification"
            and str(e.data.get("client_message_id", "")).startswith("workflow:")]


def told(event: Any) -> bool:
    return event.kind == "notification" and "workflow_run" in event.data


RECIPE = {"schema": "ator.workflow/v1",
          "input": {"type": "object", "required": ["n"]},
          "steps": [{"id": "w", "type": "wait", "seconds": 1},
                    {"id": "double", "type": "transform", "expr": "input.n * 2"}],
          "budget": {"max_steps": 10}}


async def test_an_agent_starts_a_workflow_and_gets_its_result_once_in_a_later_turn(
    make_ator: Any,
) -> None:
    def agent(request: ModelRequest) -> Reply:
        if results_in(request):
            return Reply(text="the workflow answered")
        if tool_results(request):
            return Reply(text="started; I will wait")
        return Reply(calls=[("start_workflow", {"workflow": "doubler", "input": {"n": 21},
                                                "budget": {"max_steps": 5, "usd": 0.25}})])

    agents = Agents(agent, lambda task, r: Reply(text=""))
    async with make_ator(providers={"agents": agents}, job_poll_interval=0.05) as ator:
        await ator.start_jobs()
        scope, thread = await new_thread(ator, "agents")
        await publish(ator, scope, "doubler", RECIPE)
        first = await ator.ask(scope, thread.id, "double 21 with the workflow", timeout=30)
        assert first.text == "started; I will wait"
        # The result comes later by itself: a notice, then a turn that reads it.
        notice = await wait_for_event(ator, scope, thread.id, told, timeout=60)
        await wait_for_event(ator, scope, thread.id, lambda e: e.kind == "turn_ended",
                             after_seq=notice.seq, timeout=30)
        notices = await workflow_notices(ator, scope, thread.id)
        assert len(notices) == 1
        data = notices[0].data
        assert data["workflow_run"]["status"] == "succeeded"
        assert "42" in data["text"]
        runs = await ator.service(Workflows).runs(scope)
        assert len(runs) == 1 and runs[0]["max_steps"] == 5  # the call lowered the budget
        assert runs[0]["usd_budget"] == Decimal("0.25")  # and its money
        # The tool's result named the run (whichever request carried it back).
        carried = [t for r in agents.requests for t in tool_results(r)]
        assert any(str(runs[0]["id"]) in t for t in carried), carried
        assert [unanswered_calls(r) for r in agents.requests] == [[]] * len(agents.requests)
        reading = [r for r in agents.requests if results_in(r)]
        assert len(results_in(reading[0])) == 1
        wrapped = last_user_text(reading[0])
        assert wrapped.startswith(f'<untrusted-data source="workflow run {runs[0]["id"]}">')
        # A second delivery of the same end (a job run again) tells nobody twice.
        teller_job = await ator.db.pool.fetchval(
            "SELECT count(*) FROM jobs WHERE kind = 'workflow.notify' AND org_id = $1",
            scope.org_id)
        assert teller_job == 1
        again = JobContext(id=0, kind="workflow.notify", scope=scope, attempt=2,
                           max_attempts=10, request_id=None, db=ator.db, owner="test")
        await ator.service(RunTeller).handle(again, {"run_id": str(runs[0]["id"])})
        assert len(await workflow_notices(ator, scope, thread.id)) == 1


async def test_a_run_the_agent_cancels_reports_cancelled(make_ator: Any) -> None:
    slow = {"schema": "ator.workflow/v1",
            "steps": [{"id": "w", "type": "wait", "seconds": 3600}]}

    known: dict[str, str] = {}

    def agent(request: ModelRequest) -> Reply:
        if results_in(request):
            return Reply(text="noted: " + results_in(request)[-1])
        text = last_user_text(request)
        if text == "start":
            return Reply(calls=[("start_workflow", {"workflow": "slow", "input": {}})])
        if text == "cancel":
            return Reply(calls=[("cancel_workflow", {"run_id": known["run"],
                                                     "reason": "asked"})])
        return Reply(text="ok")

    agents = Agents(agent, lambda task, r: Reply(text=""))
    async with make_ator(providers={"agents": agents}, job_poll_interval=0.05) as ator:
        await ator.start_jobs()
        scope, thread = await new_thread(ator, "agents")
        await publish(ator, scope, "slow", slow)
        await ator.ask(scope, thread.id, "start", timeout=30)
        run = (await ator.service(Workflows).runs(scope))[0]
        assert run["status"] == "running"
        known["run"] = str(run["id"])
        # Another conversation of the org cannot cancel it.
        other = await ator.create_thread(scope, thread.setup_id)
        await ator.ask(scope, other.id, "cancel", timeout=30)
        assert (await ator.service(Workflows).run(scope, run["id"]))["status"] == "running"
        await ator.ask(scope, thread.id, "cancel", timeout=30)
        notice = await wait_for_event(ator, scope, thread.id, told, timeout=60)
        assert notice.data["workflow_run"]["status"] == "cancelled"
        assert 'status="cancelled"' in notice.data["text"]
        await wait_for_event(ator, scope, thread.id, lambda e: e.kind == "turn_ended",
                             after_seq=notice.seq, timeout=30)
        assert len(await workflow_notices(ator, scope, thread.id)) == 1
        assert await workflow_notices(ator, scope, other.id) == []
        assert (await ator.service(Workflows).run(scope, run["id"]))["status"] == "cancelled"
