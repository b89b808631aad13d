"""Shared pieces of the webhook tests (not a test module): settings, a poll with a deadline,
a scripted provider, and API helpers (an org and its admin key, a thread, a signed body)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
from standardwebhooks.webhooks import Webhook

from ator.providers.scripted import ScriptedProvider, ScriptStep

__all__ = ["FAST", "SETTINGS", "a_thread", "auth", "org_admin", "scripted", "signed", "until"]

FAST = {"egress_allow": ("127.0.0.1",), "webhook_retry_delays": (0.05, 0.05, 0.05, 0.05),
        "job_poll_interval": 0.05}


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def scripted() -> dict[str, Any]:
    return {"providers": {"s": ScriptedProvider([ScriptStep(text="done")], repeat_last=True)}}


SETTINGS = {"rate_limit_per_minute": 10_000, "egress_allow": ("127.0.0.1",),
            "job_poll_interval": 0.05, "webhook_inbound_max_bytes": 4096}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def org_admin(client: httpx.AsyncClient, operator: str) -> tuple[str, str]:
    """A new org and its admin key: (org id, key)."""
    org = (await client.post("/v1/orgs", json={"name": f"o-{uuid.uuid4().hex[:6]}"},
                             headers=auth(operator))).json()
    made = await client.post(f"/v1/orgs/{org['id']}/api-keys", headers=auth(operator),
                             json={"name": "k", "role": "admin", "email": "a@b"})
    assert made.status_code == 201, made.text
    return str(org["id"]), str(made.json()["key"])


async def a_thread(client: httpx.AsyncClient, key: str) -> str:
    setup = (await client.post("/v1/setups", headers=auth(key), json={
        "name": "s", "provider": "scripted", "model": "scripted",
        "config": {"script": [{"text": "ok"}], "repeat_last": True}})).json()
    thread = await client.post("/v1/threads", headers=auth(key),
                               json={"setup_id": setup["id"]})
    assert thread.status_code == 201, thread.text
    return str(thread.json()["id"])


def signed(secret: str, msg_id: str, payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(payload)
    stamp = datetime.now(UTC)
    return body.encode(), {
        "content-type": "application/json", "webhook-id": msg_id,
        "webhook-timestamp": str(int(stamp.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, stamp, body)}
