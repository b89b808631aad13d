"""Published workflows as tools of the gateway (`/mcp`), with the SDK's own client of both eras
against the real app on loopback, real PostgreSQL and the jobs worker in this process: a
workflow with a published version is listed as `workflow__<name>` with its recipe's input
schema; a call starts a run (audited) and answers its output when it ends within the wait,
else its run id and status; a non-object input is wrapped; bad input is refused before a
run starts; viewers and other orgs neither see nor call them."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from ator import Ator, jsonenc
from ator.api.app import create_app
from ator.engine.tool_calls import ToolCalls
from ator.workflows import Workflows
from tests.mcp_servers import serve_app
from tests.test_gateway import Org, _client, _org, _text

ERAS = ["auto", "legacy"]

DOUBLE = {"schema": "ator.workflow/v1", "description": "Double a number.",
          "input": {"type": "object", "properties": {"n": {"type": "integer"}},
                    "required": ["n"], "additionalProperties": False},
          "steps": [{"id": "twice", "type": "transform", "expr": "input.n * 2"}]}
SHOUT = {"schema": "ator.workflow/v1", "input": {"type": "string", "maxLength": 50},
         "steps": [{"id": "up", "type": "transform", "expr": "$uppercase(input)"}]}
SLOW = {"schema": "ator.workflow/v1",
        "steps": [{"id": "nap", "type": "wait", "seconds": 3600}]}


@dataclass
class Flows:
    url: str
    ator: Ator
    org: Org
    runs: dict[str, uuid.UUID]


@pytest.fixture
async def flows(make_ator: Any) -> AsyncIterator[Flows]:
    async with make_ator(rate_limit_per_minute=1000, job_poll_interval=0.05,
                         gateway_workflow_wait=10.0) as ator, \
            serve_app(create_app(ator.settings, runtime=ator)) as port:
        await ator.start_jobs()
        org = await _org(ator)
        service = ator.service(Workflows)
        made: dict[str, uuid.UUID] = {}
        for name, recipe in (("double", DOUBLE), ("shout", SHOUT)):
            row = await service.create(org.scope, name)
            await service.publish(org.scope, row["id"], recipe)
            made[name] = row["id"]
        await service.create(org.scope, "draft")  # no published version: not a tool
        yield Flows(f"http://127.0.0.1:{port}/mcp", ator, org, made)


@pytest.mark.parametrize("era", ERAS)
async def test_a_published_workflow_is_a_tool_whose_call_runs_it_and_answers_its_output(
        flows: Flows, era: str) -> None:
    async with _client(flows.url, flows.org.admin, era) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert {"workflow__double", "workflow__shout"} <= set(listed)
        assert "workflow__draft" not in listed
        double = listed["workflow__double"]
        assert double.input_schema == DOUBLE["input"]
        assert double.description.startswith("Double a number.")
        assert double.annotations.read_only_hint is False
        got = await client.call_tool("workflow__double", {"n": 21})
        assert not got.is_error, _text(got)
        answer = jsonenc.loads(_untrusted_body(_text(got)))
        assert (answer["status"], answer["output"]) == ("succeeded", 42)
        assert got.meta["ator/untrusted"] is True
        # A non-object input is offered wrapped, and unwrapped for the run.
        assert listed["workflow__shout"].input_schema["required"] == ["input"]
        shout = await client.call_tool("workflow__shout", {"input": "hey"})
        assert jsonenc.loads(_untrusted_body(_text(shout)))["output"] == "HEY"
        # Input the recipe refuses never starts a run.
        bad = await client.call_tool("workflow__double", {"n": "many"})
        assert bad.is_error and bad.meta["ator/code"] == "invalid_arguments"
    run = await flows.ator.service(Workflows).run(flows.org.scope, uuid.UUID(answer["run_id"]))
    assert (run["workflow_id"], run["version"], run["input"]) == (
        flows.runs["double"], 1, {"n": 21})
    runs = await flows.ator.service(Workflows).runs(flows.org.scope)
    assert len(runs) == 2  # double and shout: the refused input started nothing
    rows = (await flows.ator.service(ToolCalls).audit(flows.org.scope)).rows
    assert [(r.tool, r.outcome) for r in reversed(rows)] == [
        ("workflow__double", "ok"), ("workflow__shout", "ok"), ("workflow__double", "error")]


async def test_a_run_that_outlasts_the_wait_answers_its_id_and_status(
        make_ator: Any) -> None:
    async with make_ator(rate_limit_per_minute=1000, job_poll_interval=0.05,
                         gateway_workflow_wait=0.2) as ator, \
            serve_app(create_app(ator.settings, runtime=ator)) as port:
        await ator.start_jobs()
        org = await _org(ator)
        service = ator.service(Workflows)
        row = await service.create(org.scope, "slow")
        await service.publish(org.scope, row["id"], SLOW)
        async with _client(f"http://127.0.0.1:{port}/mcp", org.admin, "auto") as client:
            got = await client.call_tool("workflow__slow", {})
        answer = jsonenc.loads(_untrusted_body(_text(got)))
        assert not got.is_error
        assert answer["status"] == "running"
        assert answer["follow"] == f"/v1/runs/{answer['run_id']}"
        run = await service.run(org.scope, uuid.UUID(answer["run_id"]))
        assert run["status"] == "running"
        await service.cancel(org.scope, run["id"])


@pytest.mark.parametrize("era", ERAS)
async def test_viewers_and_other_orgs_neither_see_nor_call_the_workflows(
        flows: Flows, era: str) -> None:
    other = await _org(flows.ator)
    async with _client(flows.url, flows.org.viewer, era) as viewer:
        assert not any(t.name.startswith("workflow__")
                       for t in (await viewer.list_tools()).tools)
        with pytest.raises(MCPError) as refused:
            await viewer.call_tool("workflow__double", {"n": 1})
        assert refused.value.error.data["code"] == "tool_denied"
    async with _client(flows.url, other.admin, era) as stranger:
        assert not any(t.name.startswith("workflow__")
                       for t in (await stranger.list_tools()).tools)
        with pytest.raises(MCPError) as unknown:
            await stranger.call_tool("workflow__double", {"n": 1})
        assert unknown.value.error.data["code"] == "unknown_tool"
    assert await flows.ator.service(Workflows).runs(flows.org.scope) == []
    assert await flows.ator.service(Workflows).runs(other.scope) == []


def _untrusted_body(text: str) -> str:
    """The data inside the untrusted-data wrapper (tools.base.untrusted)."""
    start = text.index(">\n") + 2
    return text[start:text.index("\n</untrusted-data>")]
