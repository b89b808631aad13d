"""Analyses over the HTTP API and out through webhooks: a run queued over the API is stored
and read back, the registry flags a kind whose rule answers too often, and a kind that
applies `webhook` sends `analysis.generated` (`<kind>_generated`) to the org's endpoint."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from ator.providers.scripted import ScriptedProvider, ScriptStep
from tests.conftest import operator_client
from tests.webhook_receiver import Receiver, serve_receiver

SETTINGS = {"job_poll_interval": 0.05, "egress_allow": ("127.0.0.1",)}
SPEC: dict[str, Any] = {
    "input": {"source": "payload"},
    "model": {"provider": "fake", "model": "scripted"},
    "output_schema": {"type": "object", "required": ["tone"]},
    "validators": [{"type": "vocabulary", "field": "tone", "values": ["calm", "angry"],
                    "on_miss": "reject"}],
    "rule": {"output": {"tone": "calm"}},
    "apply": ["record", "webhook"],
}


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with serve_receiver() as made:
        yield made


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := await check()):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)
    return found


async def test_a_run_over_the_api_is_stored_flagged_and_sent_to_the_webhook(
        make_ator: Any, receiver: Receiver) -> None:
    providers = {"fake": ScriptedProvider([ScriptStep(text='{"tone": "sad"}')],
                                          repeat_last=True)}
    async with operator_client(make_ator, providers=providers, **SETTINGS) as (
            client, key, runtime):
        await runtime.start_jobs()
        h = {"authorization": f"Bearer {key}"}
        r = await client.post("/v1/webhooks/endpoints", headers=h, json={
            "url": receiver.url("/hook"), "event_types": ["analysis.generated"]})
        assert r.status_code == 201, r.text
        name = f"tone_{uuid.uuid4().hex[:6]}"
        r = await client.put(f"/v1/analyses/kinds/{name}", json={"spec": SPEC}, headers=h)
        assert (r.status_code, r.json()["version"]) == (200, 1)
        r = await client.post("/v1/analyses/runs", headers=h, json={
            "kind": name, "target": "customer-7", "options": {"payload": {"text": "hm"}}})
        assert r.status_code == 202, r.text

        async def stored() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = (await client.get(
                "/v1/analyses", params={"kind": name}, headers=h)).json()["data"]
            return found

        [a] = await until(stored)
        # "sad" is outside the closed vocabulary: rejected, so the rule answered.
        assert (a["model"], a["verdict"], a["output"], a["cost_usd"]) == (
            "rule", "reject", {"tone": "calm"}, "0.000000")
        one = (await client.get(f"/v1/analyses/{a['id']}", headers=h)).json()
        assert one["id"] == a["id"] and one["target"] == "customer-7"
        stats = (await client.get("/v1/analyses/stats", headers=h)).json()["data"]
        [mine] = [s for s in stats if s["kind"] == name]
        assert (mine["runs"], mine["fallbacks"], mine["flagged"]) == (1, 1, True)
        [seen] = await receiver.wait_for("/hook", 1)
        body = json.loads(seen.body)
        # The outbox's one envelope: {type, timestamp, data}.
        assert (body["type"], body["data"]["event"]) == ("analysis.generated",
                                                         f"{name}_generated")
        assert body["data"]["id"] == a["id"]
        missing = await client.get(f"/v1/analyses/{uuid.uuid4()}", headers=h)
        assert (missing.status_code, missing.json()["code"]) == (404, "not_found")
