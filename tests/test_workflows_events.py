"""A run's event log followed like a thread's (long-poll and SSE over the same follow), the
lifecycle raced 100 times against running maps, and the steps list of a 1,000-item map of
100 KB outputs staying under 1 MB."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from ator.engine.runtime import Ator
from ator.errors import Conflict
from ator.workflows import Workflows
from tests.conftest import operator_client
from tests.workflow_util import org, published, recipe

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
async def api(make_ator: Any, own_database: str
              ) -> AsyncIterator[tuple[httpx.AsyncClient, str, Ator]]:
    # A database of its own: these runs' jobs must not queue behind what earlier tests of
    # the session left in the shared one (their runs timed out in the full suite).
    async with operator_client(make_ator, database_url=own_database,
                               rate_limit_per_minute=100_000,
                               job_poll_interval=0.05, job_concurrency=40) as made:
        await made[2].start_jobs()
        yield made


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_long_poll_and_sse_follow_a_run_to_its_end(api: Any) -> None:
    client, operator, ator = api
    scope = await org(ator)
    flows = ator.service(Workflows)
    wf = await published(ator, scope, recipe(
        {"id": "each", "type": "map", "over": "[1..20]", "concurrency": 4,
         "step": {"type": "transform", "expr": "item"}}))
    run, _ = await flows.start(scope, wf, {})
    # Long-poll: each call waits for the next commit; the seqs come gapless, once each.
    seen: list[int] = []
    after = 0
    async with asyncio.timeout(60):
        while True:
            frames = await ator.wait_run_events(scope, run["id"], after_seq=after, timeout=5)
            seen += [f["seq"] for f in frames]
            after = seen[-1] if seen else after
            if any(f["type"] == "run_succeeded" for f in frames):
                break
    assert seen == list(range(1, len(seen) + 1))
    # SSE from a cursor in the middle: exactly the rest, then (the run being over) quiet.
    frames = await ator.run_frames(scope, run["id"], after_seq=5, keepalive=0.5)
    got: list[dict[str, Any]] = []
    async with asyncio.timeout(30):
        async for frame in frames:
            if frame is None:
                break
            got.append(frame)
    await frames.aclose()
    assert [f["seq"] for f in got] == list(range(6, len(seen) + 1))
    assert got[-1]["type"] == "run_succeeded"
    _ = operator, client


async def test_the_long_poll_route_follows_a_live_run_and_another_org_gets_404(
    api: Any,
) -> None:
    client, operator, _ = api
    made = []
    for name in ("a", "b"):
        o = (await client.post("/v1/orgs", json={"name": f"sse-{name}-{random.random()}"},
                               headers=auth(operator))).json()
        k = await client.post(f"/v1/orgs/{o['id']}/api-keys", headers=auth(operator),
                              json={"name": "m", "role": "admin", "email": "m@x"})
        made.append(str(k.json()["key"]))
    mine, theirs = made
    w = (await client.post("/v1/workflows", headers=auth(mine), json={"name": "s"})).json()
    await client.post(f"/v1/workflows/{w['id']}/versions", headers=auth(mine), json={
        "recipe": recipe({"id": "a", "type": "wait", "seconds": 1},
                         {"id": "b", "type": "transform", "expr": "2"})})
    run = (await client.post(f"/v1/workflows/{w['id']}/runs", headers=auth(mine),
                             json={})).json()
    assert (await client.get(f"/v1/runs/{run['id']}/stream", headers=auth(theirs))
            ).status_code == 404
    # (The stream itself is read through a real server in tests/e2e: the in-process
    # transport buffers a response until it ends.) The long-poll over HTTP:
    kinds: list[str] = []
    after = 0
    async with asyncio.timeout(60):
        while "run_succeeded" not in kinds:
            page = (await client.get(f"/v1/runs/{run['id']}/events", headers=auth(mine),
                                     params={"after_seq": after, "wait": 5})).json()
            kinds += [e["kind"] for e in page["data"]]
            after = page["next_after_seq"]
    assert kinds[0] == "run_started" and "step_done" in kinds
    polled = await client.get(f"/v1/runs/{run['id']}/events", headers=auth(mine),
                              params={"after_seq": 10_000, "wait": 0.2})
    assert polled.status_code == 200 and polled.json()["data"] == []


async def test_pause_resume_cancel_raced_100_times_never_reopen_a_terminal_run(
    api: Any,
) -> None:
    _, _, ator = api
    scope = await org(ator)
    flows = ator.service(Workflows)
    wf = await published(ator, scope, recipe(
        {"id": "each", "type": "map", "over": "[1..30]", "concurrency": 5,
         "step": {"type": "transform", "expr": "item"}}))
    rng = random.Random(19)
    runs = []
    for round_no in range(100):
        run, _ = await flows.start(scope, wf, {}, key=f"race-{round_no}")
        runs.append(run["id"])

        async def poke(action: str, run_id: Any = run["id"]) -> str | None:
            with contextlib.suppress(Conflict):
                return str((await getattr(flows, action)(scope, run_id))["status"])
            return None

        actions = ["pause", "resume"] * 4 + ["cancel"] + ["resume", "pause"] * 4
        rng.shuffle(actions)
        results = await asyncio.gather(*(poke(a) for a in actions))
        final = await flows.run(scope, run["id"])
        assert final["status"] == "cancelled", (round_no, actions, results)
        cancel_at = actions.index("cancel")
        # Whatever came after the cancel committed, nothing reopened it.
        assert "cancelled" in results[cancel_at:] or results[cancel_at] == "cancelled"
        assert final["cancel_reason"] == "user"
    # Once every map's in-flight items settled, still cancelled and no queued step ran after.
    for run_id in runs:
        assert (await flows.run(scope, run_id))["status"] == "cancelled"
        for action in ("resume", "pause"):
            with pytest.raises(Conflict):
                await getattr(flows, action)(scope, run_id)


async def test_the_steps_list_of_a_1000_item_map_of_100_kb_outputs_stays_under_1_mb(
    api: Any,
) -> None:
    client, operator, ator = api
    o = (await client.post("/v1/orgs", json={"name": f"big-{random.random()}"},
                           headers=auth(operator))).json()
    key = str((await client.post(f"/v1/orgs/{o['id']}/api-keys", headers=auth(operator),
                                 json={"name": "a", "role": "admin", "email": "a@x"})
               ).json()["key"])
    w = (await client.post("/v1/workflows", headers=auth(key), json={"name": "big"})).json()
    await client.post(f"/v1/workflows/{w['id']}/versions", headers=auth(key), json={
        "recipe": recipe({"id": "each", "type": "map", "over": "[1..1000]", "concurrency": 40,
                          "step": {"type": "transform", "expr": "$pad('', 100000, 'x')"}},
                         budget={"max_steps": 1001})})
    run = (await client.post(f"/v1/workflows/{w['id']}/runs", headers=auth(key),
                             json={})).json()["id"]
    flows = ator.service(Workflows)
    async with asyncio.timeout(240):
        while (await client.get(f"/v1/runs/{run}", headers=auth(key))).json()["status"] \
                == "running":
            await ator.wait_run_events(flows_scope(o), run, after_seq=0, timeout=1)
    # The items are done (100 MB of outputs); the map's own 100 MB list is over the value
    # cap, so the run paused naming it — the list of steps is what is measured.
    total, cursor, rows = 0, None, []
    while True:
        answer = await client.get(f"/v1/runs/{run}/steps", headers=auth(key),
                                  params={"limit": 200, **({"cursor": cursor} if cursor else {})})
        total += len(answer.content)
        rows += answer.json()["data"]
        cursor = answer.json()["next_cursor"]
        if cursor is None:
            break
    items = [r for r in rows if r["path"].startswith("each/")]
    assert len(items) == 1000 and all(r["status"] == "done" for r in items)
    assert all(r["output_size"] == 100_002 for r in items)
    assert total < 1_000_000, total
    _ = flows


def flows_scope(o: dict[str, Any]) -> Any:
    import uuid

    from ator.store.scope import Scope
    return Scope(uuid.UUID(o["id"]))
