"""Workflows over HTTP (in-process app, real PostgreSQL, jobs in this process): publish (admin
only), a malformed recipe's 422 naming the pointer, idempotent start (201 then 200),
events, steps without outputs (a big map's list stays small), one step with its output,
cancel, another org's 404."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from ator.engine.runtime import Ator
from tests.conftest import operator_client


@pytest.fixture
async def api(make_ator: Any) -> AsyncIterator[tuple[httpx.AsyncClient, str, Ator]]:
    async with operator_client(make_ator, rate_limit_per_minute=100_000,
                               job_poll_interval=0.05,
                               workflow_value_bytes=16_000_000) as made:
        await made[2].start_jobs()
        yield made


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def org_keys(client: httpx.AsyncClient, operator: str) -> tuple[str, str]:
    """(admin key, member key) of a new org."""
    org = (await client.post("/v1/orgs", json={"name": f"o-{uuid.uuid4().hex[:6]}"},
                             headers=auth(operator))).json()
    keys = []
    for role in ("admin", "member"):
        made = await client.post(f"/v1/orgs/{org['id']}/api-keys", headers=auth(operator),
                                 json={"name": role, "role": role, "email": f"{role}@x"})
        assert made.status_code == 201, made.text
        keys.append(str(made.json()["key"]))
    return keys[0], keys[1]


async def publish(client: httpx.AsyncClient, admin: str, recipe: dict[str, Any]) -> str:
    made = await client.post("/v1/workflows", headers=auth(admin),
                             json={"name": f"wf-{uuid.uuid4().hex[:6]}"})
    assert made.status_code == 201, made.text
    wf = made.json()["id"]
    version = await client.post(f"/v1/workflows/{wf}/versions", headers=auth(admin),
                                json={"recipe": recipe})
    assert version.status_code == 201, version.text
    return str(wf)


async def finished(client: httpx.AsyncClient, key: str, run_id: str,
                   timeout: float = 120.0) -> dict[str, Any]:
    """Read the run's event log page by page until the run ends or pauses."""
    after, deadline = 0, time.monotonic() + timeout
    while time.monotonic() < deadline:
        page = (await client.get(f"/v1/runs/{run_id}/events", headers=auth(key),
                                 params={"after_seq": after})).json()
        kinds = {e["kind"] for e in page["data"]}
        after = page["next_after_seq"]
        if kinds & {"run_succeeded", "run_failed", "run_cancelled", "run_paused"}:
            return dict((await client.get(f"/v1/runs/{run_id}", headers=auth(key))).json())
        if not page["data"]:
            await asyncio.sleep(0.05)
    raise AssertionError("the run did not finish in time")


async def test_publish_start_twice_watch_cancel_and_isolation(api: Any) -> None:
    client, operator, _ = api
    admin, member = await org_keys(client, operator)
    _, stranger = await org_keys(client, operator)
    recipe = {"schema": "ator.workflow/v1",
              "steps": [{"id": "w", "type": "wait", "seconds": 3600}]}
    denied = await client.post("/v1/workflows", headers=auth(member), json={"name": "x"})
    assert denied.status_code == 403
    wf = await publish(client, admin, recipe)
    schema = (await client.get("/v1/workflows/schema", headers=auth(member))).json()
    assert schema["title"] == "ator.workflow/v1"
    first = await client.post(f"/v1/workflows/{wf}/runs", headers=auth(member),
                              json={"input": {}, "key": "order-7"})
    again = await client.post(f"/v1/workflows/{wf}/runs", headers=auth(member),
                              json={"input": {}, "key": "order-7"})
    assert (first.status_code, again.status_code) == (201, 200)
    run = first.json()["id"]
    assert again.json()["id"] == run and again.json()["created"] is False
    for path in (f"/v1/runs/{run}", f"/v1/runs/{run}/steps", f"/v1/runs/{run}/events",
                 f"/v1/workflows/{wf}"):
        assert (await client.get(path, headers=auth(stranger))).status_code == 404
    assert (await client.post(f"/v1/runs/{run}/cancel", headers=auth(stranger))
            ).status_code == 404
    cancelled = await client.post(f"/v1/runs/{run}/cancel", headers=auth(member),
                                  json={"reason": "changed my mind"})
    assert cancelled.status_code == 200
    assert (cancelled.json()["status"], cancelled.json()["cancel_reason"]) == (
        "cancelled", "changed my mind")
    done = await finished(client, member, run)
    assert done["status"] == "cancelled" and done["pause_reason"] is None
    reopen = await client.post(f"/v1/runs/{run}/resume", headers=auth(member))
    assert (reopen.status_code, reopen.json()["code"]) == (409, "run_state_conflict")
    events = (await client.get(f"/v1/runs/{run}/events", headers=auth(member))).json()
    assert [e["seq"] for e in events["data"]] == list(range(1, len(events["data"]) + 1))
    listed = (await client.get("/v1/runs", headers=auth(member),
                               params={"workflow_id": wf})).json()
    assert [r["id"] for r in listed["data"]] == [run]


async def test_a_malformed_recipe_is_a_422_naming_the_pointer(api: Any) -> None:
    client, operator, _ = api
    admin, _ = await org_keys(client, operator)
    made = (await client.post("/v1/workflows", headers=auth(admin), json={"name": "w"})).json()
    bad = {"schema": "ator.workflow/v1",
           "steps": [{"id": "a", "type": "transform", "expr": "1"},
                     {"id": "b", "type": "map", "over": "input.xs"}]}
    for path in (f"/v1/workflows/{made['id']}/versions", "/v1/workflows/validate"):
        answer = await client.post(path, headers=auth(admin), json={"recipe": bad})
        assert answer.status_code == 422
        assert answer.headers["content-type"].startswith("application/problem+json")
        body = answer.json()
        assert body["code"] == "recipe_invalid"
        assert body["errors"][0]["pointer"] == "/steps/1"
        assert "'step' is a required property" in body["errors"][0]["msg"]
        assert "/steps/1" in body["detail"]


async def test_steps_of_a_big_map_are_listed_without_outputs(api: Any) -> None:
    client, operator, _ = api
    admin, member = await org_keys(client, operator)
    # 300 items whose outputs are 20 KB each: 6 MB of outputs in all.
    wf = await publish(client, admin, {
        "schema": "ator.workflow/v1",
        "steps": [{"id": "each", "type": "map", "over": "[1..300]", "concurrency": 30,
                   "step": {"type": "transform", "expr": "$pad('', 20000, 'x')"}},
                  {"id": "n", "type": "transform", "expr": "$count(steps.each)"}]})
    run = (await client.post(f"/v1/workflows/{wf}/runs", headers=auth(member),
                             json={})).json()["id"]
    done = await finished(client, member, run)
    assert (done["status"], done["output"]) == ("succeeded", 300), done
    pages, cursor, total_bytes, rows = 0, None, 0, []
    while True:
        answer = await client.get(f"/v1/runs/{run}/steps", headers=auth(member),
                                  params={"limit": 200, **({"cursor": cursor} if cursor else {})})
        total_bytes += len(answer.content)
        pages += 1
        page = answer.json()
        rows += page["data"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(rows) == 302 and len({r["id"] for r in rows}) == 302
    assert all("output" not in r for r in rows)
    items = [r for r in rows if r["path"].startswith("each/")]
    assert all(r["output_size"] == 20_002 and len(r["preview"].encode()) <= 2048
               for r in items)
    assert total_bytes < 1_000_000, total_bytes  # outputs were 6 MB
    one = (await client.get(f"/v1/runs/{run}/steps/{items[0]['id']}",
                            headers=auth(member))).json()
    assert one["output"] == "x" * 20_000
    assert len(json.dumps(one["output"])) == one["output_size"]


async def test_the_workflow_cli_validates_publishes_runs_and_cancels(api: Any) -> None:
    from ator.api.app import create_app
    from ator.cli import workflow as cli
    from ator.cli.remote import ApiClient, RemoteError

    client, operator, runtime = api
    admin, member = await org_keys(client, operator)
    app = create_app(runtime.settings, runtime=runtime)
    app.state.ator = runtime
    as_admin = ApiClient("http://ator", admin, transport=httpx.ASGITransport(app=app))
    as_member = ApiClient("http://ator", member, transport=httpx.ASGITransport(app=app))
    try:
        with pytest.raises(RemoteError) as caught:
            await cli.validate(as_member, {"schema": "ator.workflow/v1", "steps": [{}]})
        assert caught.value.code == "recipe_invalid" and "/steps/0" in caught.value.message
        recipe = {"schema": "ator.workflow/v1",
                  "steps": [{"id": "w", "type": "wait", "seconds": 3600}]}
        assert (await cli.validate(as_member, recipe))["valid"] is True
        first = await cli.publish(as_admin, "nightly", recipe)
        second = await cli.publish(as_admin, "nightly", recipe)
        assert (first["version"], second["version"]) == (1, 2)
        assert first["workflow_id"] == second["workflow_id"]
        run = await cli.start(as_member, first["workflow_id"], {}, "k-1")
        again = await cli.start(as_member, first["workflow_id"], {}, "k-1")
        assert again["id"] == run["id"] and again["version"] == 2
        assert (await cli.status(as_member, run["id"]))["status"] == "running"
        assert (await cli.cancel(as_member, run["id"], "no"))["cancel_reason"] == "no"
        with pytest.raises(RemoteError) as caught:
            await cli.cancel(as_member, run["id"], "again")
        assert caught.value.code == "run_state_conflict"
    finally:
        await as_admin.aclose()
        await as_member.aclose()
