"""Workflows end to end: a real `ator serve` (no jobs) and a real `ator worker` on real
PostgreSQL. Publish (a malformed recipe is a 422 naming its JSON pointer), start twice with
the same key (one run), watch its events over SSE, cancel; another org gets 404."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.conftest import Deployment, DeploymentFactory
from tests.e2e.replica import _clean_environ

pytestmark = pytest.mark.e2e


@pytest.fixture
def worker_of(tmp_path: object) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _worker(deployment: Deployment, procs: list[subprocess.Popen[bytes]]) -> None:
    with (deployment.log_dir / "worker.stderr.log").open("wb") as log:  # the child keeps it
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "ator.cli.main", "worker"], stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT,
            env={**_clean_environ(), "ATOR_OWNER_ID": "e2e-worker", **deployment.env}))


async def test_publish_start_twice_watch_cancel_over_a_real_serve_and_worker(
    deployments: DeploymentFactory, worker_of: list[subprocess.Popen[bytes]],
) -> None:
    deployment = deployments(ATOR_JOB_POLL_INTERVAL="0.1")
    serve = deployment.start("api", ATOR_RUN_JOBS="false")
    _worker(deployment, worker_of)
    operator = deployment.client(serve)
    keys = []
    for name in ("mine", "theirs"):
        org = await operator.ok("POST", "/v1/orgs", 201,
                                json={"name": f"wf-{name}-{uuid.uuid4().hex[:6]}"})
        keys.append((await operator.ok("POST", f"/v1/orgs/{org['id']}/api-keys", 201, json={
            "name": "k", "role": "admin", "email": f"{name}@wf.test"}))["key"])
    api, stranger = deployment.client(serve, keys[0]), deployment.client(serve, keys[1])
    wf = await api.ok("POST", "/v1/workflows", 201, json={"name": "e2e"})
    bad = await api.request("POST", f"/v1/workflows/{wf['id']}/versions", json={"recipe": {
        "schema": "ator.workflow/v1",
        "steps": [{"id": "m", "type": "map", "over": "[1..3]",
                   "step": {"type": "transform", "expr": "item +"}}]}})
    assert bad.status_code == 422 and bad.json()["code"] == "recipe_invalid"
    assert [e["pointer"] for e in bad.json()["errors"]] == ["/steps/0/step/expr"]
    await api.ok("POST", f"/v1/workflows/{wf['id']}/versions", 201, json={"recipe": {
        "schema": "ator.workflow/v1",
        "steps": [{"id": "each", "type": "map", "over": "[1..20]", "concurrency": 5,
                   "step": {"type": "transform", "expr": "item * 2"}},
                  {"id": "hold", "type": "wait", "seconds": 3600}]}})
    first, second = await asyncio.gather(*(
        api.request("POST", f"/v1/workflows/{wf['id']}/runs",
                    json={"input": {}, "key": "order-19"}) for _ in range(2)))
    assert sorted((first.status_code, second.status_code)) == [200, 201]
    run = first.json()["id"]
    assert second.json()["id"] == run
    assert (await stranger.request("GET", f"/v1/runs/{run}")).status_code == 404
    assert (await stranger.request("GET", f"/v1/runs/{run}/stream")).status_code == 404
    assert (await stranger.request("POST", f"/v1/runs/{run}/cancel")).status_code == 404
    # Watch its events live over SSE until the map is done and the wait begins.
    kinds: list[str] = []
    seqs: list[int] = []
    async with httpx.AsyncClient(base_url=serve.url, timeout=60) as raw, \
            asyncio.timeout(90), raw.stream(
                "GET", f"/v1/runs/{run}/stream",
                headers={"Authorization": f"Bearer {keys[0]}"}) as answer:
        assert answer.status_code == 200
        async for line in answer.aiter_lines():
            if line.startswith("data: "):
                frame = json.loads(line[6:])
                kinds.append(frame["type"])
                seqs.append(frame["seq"])
                if frame["type"] == "step_done" and frame["data"]["data"]["step"] == "each":
                    break
    assert kinds[0] == "run_started" and seqs == list(range(1, len(seqs) + 1))
    assert kinds.count("step_done") == 21  # 20 items and the map
    cancelled = await api.ok("POST", f"/v1/runs/{run}/cancel", json={"reason": "done here"})
    assert (cancelled["status"], cancelled["cancel_reason"]) == ("cancelled", "done here")
    reopened = await api.request("POST", f"/v1/runs/{run}/resume")
    assert (reopened.status_code, reopened.json()["code"]) == (409, "run_state_conflict")
    listed = await api.ok("GET", "/v1/runs", params={"workflow_id": wf["id"]})
    assert [r["id"] for r in listed["data"]] == [run]
    assert (await stranger.ok("GET", "/v1/runs"))["data"] == []
