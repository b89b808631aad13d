"""Webhooks across a SIGKILL (real `ator serve` processes, real PostgreSQL, a loopback
receiver): a turn that committed on a replica killed before any worker ran its delivery is
still delivered, once and verifiably signed, when a replica with jobs comes back (the event
and its job were written by the turn's final statement)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from tests.e2e.client import script_setup
from tests.e2e.conftest import DeploymentFactory
from tests.webhook_receiver import serve_receiver

pytestmark = pytest.mark.e2e


async def test_a_committed_turn_is_delivered_after_sigkill(
        deployments: DeploymentFactory) -> None:
    async with serve_receiver() as receiver:
        deployment = deployments(ATOR_EGRESS_ALLOW="127.0.0.1", ATOR_JOB_POLL_INTERVAL="0.1")
        first = deployment.start("no-jobs", ATOR_RUN_JOBS="false")
        operator = deployment.client(first)
        org = await operator.ok("POST", "/v1/orgs", 201, json={"name": f"hooks-{uuid.uuid4()}"})
        key = (await operator.ok("POST", f"/v1/orgs/{org['id']}/api-keys", 201, json={
            "name": "k", "role": "admin", "email": "a@hooks.test"}))["key"]
        api = deployment.client(first, key)
        endpoint = await api.ok("POST", "/v1/webhooks/endpoints", 201,
                                json={"url": receiver.url("/after-kill")})
        setup = await api.create_setup(script_setup({"text": "done"}))
        thread = await api.create_thread(setup["id"])
        await api.post_message(thread["id"], "hello")
        end = (await api.follow(thread["id"]))[-1]
        first.kill()  # right after the commit; no worker ever ran
        assert receiver.at("/after-kill") == []

        second = deployment.start("with-jobs")
        [seen] = await receiver.wait_for("/after-kill", 1, timeout=60)
        body = Webhook(endpoint["secret"]).verify(seen.body, seen.headers)
        assert body["data"]["turn_id"] == end["turn_id"]
        again = deployment.client(second, key)
        deadline = time.monotonic() + 30
        while (await again.ok("GET", f"/v1/webhooks/endpoints/{endpoint['id']}/deliveries")
               )["data"][0]["status"] != "delivered":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        assert len(receiver.at("/after-kill")) == 1


async def test_an_inbound_webhook_answered_with_no_worker_is_one_message_later(
        deployments: DeploymentFactory) -> None:
    """A replica that runs no jobs answers 202 five times for one webhook id, then is
    SIGKILLed; a replica with jobs started afterwards makes it one thread message (it was
    stored before the first answer, once)."""
    deployment = deployments(ATOR_JOB_POLL_INTERVAL="0.1")
    first = deployment.start("inbound-no-jobs", ATOR_RUN_JOBS="false")
    operator = deployment.client(first)
    org = await operator.ok("POST", "/v1/orgs", 201, json={"name": f"in-{uuid.uuid4()}"})
    key = (await operator.ok("POST", f"/v1/orgs/{org['id']}/api-keys", 201, json={
        "name": "k", "role": "admin", "email": "a@in.test"}))["key"]
    api = deployment.client(first, key)
    setup = await api.create_setup(script_setup({"text": "noted"}))
    inbound = await api.ok("POST", "/v1/webhooks/inbound", 201, json={
        "name": "orders", "mapping": {"to": "thread", "setup_id": setup["id"],
                                      "key": "order", "text": '"order " & order'}})
    body, stamp = json.dumps({"order": "o-77"}), datetime.now(UTC)
    headers = {"webhook-id": "msg_o77", "webhook-timestamp": str(int(stamp.timestamp())),
               "webhook-signature": Webhook(inbound["secret"]).sign("msg_o77", stamp, body)}
    answers = [await api.ok("POST", f"/v1/hooks/{inbound['id']}", 202, content=body,
                            headers=headers) for _ in range(5)]
    assert [a["duplicate"] for a in answers] == [False, True, True, True, True]
    first.kill()

    second = deployment.start("inbound-with-jobs")
    again = deployment.client(second, key)
    path = f"/v1/webhooks/inbound/received/{answers[0]['id']}"
    deadline = time.monotonic() + 60
    while (received := await again.ok("GET", path))["status"] != "delivered":
        assert received["status"] == "received" and time.monotonic() < deadline, received
        await asyncio.sleep(0.1)
    thread_id = received["result"]["thread_id"]
    await again.follow(thread_id)
    said = [e for e in await again.events(thread_id)
            if e["kind"] == "message" and "order o-77" in json.dumps(e["data"])]
    assert len(said) == 1
    assert len((await again.ok("GET", f"/v1/webhooks/inbound/{inbound['id']}/received")
                )["data"]) == 1
