"""Webhooks across a SIGKILL (real `ator serve` processes, real PostgreSQL, a loopback
receiver): a turn that committed on a replica killed before any worker ran its delivery is
still delivered, once and verifiably signed, when a replica with jobs comes back (the event
and its job were written by the turn's final statement)."""

from __future__ import annotations

import asyncio
import time
import uuid

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
