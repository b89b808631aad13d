"""Bounded inputs and truthful answers at the HTTP API, in-process (ASGI transport, real
PostgreSQL): the body limit runs before auth, /metrics is private, stop says whether a turn
ran, a reused client_message_id with other content is a conflict, and long-polls are capped
per user and per org. Every error is problem+json with a stable code."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from ator import Ator
from ator.api.app import create_app
from ator.api.limits import WaitSlots
from ator.store import keys as key_store
from ator.store import orgs as org_store
from ator.store.scope import Scope

Serve = Callable[..., AbstractAsyncContextManager[tuple[httpx.AsyncClient, Ator, FastAPI]]]


@pytest.fixture
def serve(make_ator: Any) -> Serve:
    @asynccontextmanager
    async def factory(**overrides: Any
                      ) -> AsyncIterator[tuple[httpx.AsyncClient, Ator, FastAPI]]:
        async with make_ator(**{"rate_limit_per_minute": 10_000, **overrides}) as runtime:
            app = create_app(runtime.settings, runtime=runtime)
            app.state.ator = runtime
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://ator",
                                         timeout=30) as client:
                yield client, runtime, app

    return factory


async def admin_key(runtime: Ator, name: str) -> str:
    org = await runtime.create_org(f"{name}-{uuid.uuid4().hex[:6]}")
    user = await org_store.create_user(runtime.db, Scope(org.id), f"admin@{name}", "admin")
    _, key = await key_store.create_key(runtime.db, Scope(org.id), user_id=user, name="k",
                                        role="admin")
    return key


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code and body["status"] == status
    assert body["type"].endswith("/" + code) and body["title"] and body["detail"]
    return body


async def new_thread(client: httpx.AsyncClient, key: str, *steps: dict[str, Any]) -> str:
    setup = await client.post("/v1/setups", headers=auth(key), json={
        "name": f"s-{uuid.uuid4().hex[:6]}", "provider": "scripted", "model": "scripted",
        "config": {"script": list(steps) or [{"text": "hi"}]}})
    assert setup.status_code == 201, setup.text
    thread = await client.post("/v1/threads", headers=auth(key),
                               json={"setup_id": setup.json()["id"]})
    assert thread.status_code == 201, thread.text
    return str(thread.json()["id"])


async def follow(client: httpx.AsyncClient, key: str, thread_id: str, kind: str,
                 after_seq: int = 0) -> dict[str, Any]:
    """Long-poll until an event of `kind` is committed (bounded by the client timeout)."""
    seq = after_seq
    for _ in range(20):
        page = (await client.get(f"/v1/threads/{thread_id}/events", headers=auth(key),
                                 params={"after_seq": seq, "wait": 5})).json()
        for frame in page["data"]:
            if frame["type"] == kind:
                return dict(frame["data"])
        seq = page["last_seq"]
    raise AssertionError(f"no {kind} event")


# -- body limit -----------------------------------------------------------------------------


async def test_an_oversized_body_is_413_before_auth_and_the_largest_message_fits(
    serve: Serve,
) -> None:
    async with serve() as (client, runtime, _app):
        limit = runtime.settings.max_body_bytes
        assert limit == 1024 * 1024
        too_big = await client.post("/v1/threads", content=b"{" + b" " * limit + b"}",
                                    headers={"content-type": "application/json"})
        assert assert_problem(too_big, 413, "payload_too_large")["limit"] == limit

        async def stream() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
            for _ in range(limit // 65536 + 2):
                yield b" " * 65536

        key = await admin_key(runtime, "bodies")
        streamed = await client.post("/v1/threads", content=stream(), headers=auth(key))
        assert_problem(streamed, 413, "payload_too_large")

        # The largest legitimate request: a 100,000-character message whose every character
        # JSON escapes to six bytes (~600 kB) is well within the default limit.
        thread_id = await new_thread(client, key)
        body = json.dumps({"text": "\u00e9" * 100_000}).encode()
        assert len(body) > 600_000
        posted = await client.post(f"/v1/threads/{thread_id}/messages", content=body,
                                   headers={**auth(key), "content-type": "application/json"})
        assert posted.status_code == 202, posted.text


# -- /metrics -------------------------------------------------------------------------------


async def test_metrics_do_not_exist_without_a_token(serve: Serve) -> None:
    async with serve() as (client, _runtime, _app):
        assert_problem(await client.get("/metrics"), 404, "not_found")
        assert_problem(await client.get("/metrics", headers=auth("anything")), 404,
                       "not_found")


async def test_metrics_need_the_metrics_token(serve: Serve) -> None:
    async with serve(metrics_token="m-" + uuid.uuid4().hex) as (client, runtime, _app):
        token = runtime.settings.metrics_token
        assert token is not None
        assert_problem(await client.get("/metrics"), 401, "unauthenticated")
        api_key = await admin_key(runtime, "metrics")  # an API key is not the metrics token
        assert_problem(await client.get("/metrics", headers=auth(api_key)), 401,
                       "unauthenticated")
        ok = await client.get("/metrics", headers=auth(token.get_secret_value()))
        assert ok.status_code == 200 and "ator_turns" in ok.text
        assert "ator_hub_waiters 0.0" in ok.text


# -- stop -----------------------------------------------------------------------------------


async def test_stop_says_whether_a_turn_was_running(serve: Serve) -> None:
    async with serve() as (client, runtime, _app):
        key = await admin_key(runtime, "stop")
        thread_id = await new_thread(client, key, {"hang": True})
        idle = await client.post(f"/v1/threads/{thread_id}/stop", headers=auth(key))
        assert idle.status_code == 200
        assert idle.json() == {"thread_id": thread_id, "stop": "idle", "running": False,
                               "descendants": 0}

        posted = await client.post(f"/v1/threads/{thread_id}/messages", headers=auth(key),
                                   json={"text": "hang on"})
        assert posted.status_code == 202
        started = await follow(client, key, thread_id, "turn_started")
        running = await client.post(f"/v1/threads/{thread_id}/stop", headers=auth(key))
        assert running.status_code == 202
        assert running.json() == {"thread_id": thread_id, "stop": "requested",
                                  "running": True, "reason": "cancelled:user",
                                  "descendants": 0}
        ended = await follow(client, key, thread_id, "turn_ended", started["seq"])
        assert ended["data"]["stop_reason"] == "cancelled:user"

        # Another org's thread is not found, whether or not it runs.
        intruder = await admin_key(runtime, "intruder")
        assert_problem(await client.post(f"/v1/threads/{thread_id}/stop",
                                         headers=auth(intruder)), 404, "not_found")


# -- idempotency ----------------------------------------------------------------------------


async def test_a_client_message_id_reused_with_other_content_is_a_conflict(
    serve: Serve,
) -> None:
    async with serve() as (client, runtime, _app):
        key = await admin_key(runtime, "idem")
        thread_id = await new_thread(client, key)
        path = f"/v1/threads/{thread_id}/messages"
        first = await client.post(path, headers=auth(key),
                                  json={"text": "pay 10", "client_message_id": "m-1"})
        again = await client.post(path, headers=auth(key),
                                  json={"text": "pay 10", "client_message_id": "m-1"})
        assert (first.status_code, again.status_code) == (202, 202)
        assert first.json()["created"] is True and again.json()["created"] is False
        assert again.json()["id"] == first.json()["id"]

        changed = await client.post(path, headers=auth(key),
                                    json={"text": "pay 1000", "client_message_id": "m-1"})
        assert "m-1" in assert_problem(changed, 409, "idempotency_conflict")["detail"]

        # Another member of the org reusing the id, even with the same text, is not a resend.
        member = (await client.post("/v1/api-keys", headers=auth(key), json={
            "name": "m", "role": "member", "email": "m@idem"})).json()["key"]
        assert_problem(await client.post(path, headers=auth(member), json={
            "text": "pay 10", "client_message_id": "m-1"}), 409, "idempotency_conflict")

        # Ids are per thread: another org uses the same id on its own thread freely, and
        # cannot reach this thread with it.
        other = await admin_key(runtime, "other")
        other_thread = await new_thread(client, other)
        mine = await client.post(f"/v1/threads/{other_thread}/messages", headers=auth(other),
                                 json={"text": "pay 1000", "client_message_id": "m-1"})
        assert mine.status_code == 202 and mine.json()["created"] is True
        assert_problem(await client.post(path, headers=auth(other), json={
            "text": "pay 10", "client_message_id": "m-1"}), 404, "not_found")


# -- long-poll caps -------------------------------------------------------------------------


async def until(check: Callable[[], bool]) -> None:
    """Yield to the server's tasks until `check` holds (bounded)."""
    async with asyncio.timeout(10):
        while not check():  # noqa: ASYNC110  # a counter in memory has no event to await
            await asyncio.sleep(0.01)


async def test_long_polls_are_capped_per_user_and_per_org(serve: Serve) -> None:
    async with serve(max_waits_per_user=2, max_waits_per_org=3) as (client, runtime, app):
        key = await admin_key(runtime, "waits")
        org_id = (await client.get("/v1/orgs", headers=auth(key))).json()["data"][0]["id"]
        viewer = (await client.post("/v1/api-keys", headers=auth(key), json={
            "name": "v", "role": "viewer", "email": "v@waits"})).json()["key"]
        thread_id = await new_thread(client, key)
        events = f"/v1/threads/{thread_id}/events"
        slots: WaitSlots = app.state.wait_slots

        def wait(who: str) -> asyncio.Task[httpx.Response]:
            return asyncio.create_task(client.get(events, headers=auth(who),
                                                  params={"wait": 30}))

        held = [wait(key), wait(key)]
        await until(lambda: slots.held(uuid.UUID(org_id)) == 2)
        over_user = assert_problem(await client.get(events, headers=auth(key),
                                                    params={"wait": 30}),
                                   429, "too_many_waits")
        assert "user" in over_user["detail"]
        held.append(wait(viewer))  # another user of the org: within the org's cap
        await until(lambda: slots.held(uuid.UUID(org_id)) == 3)
        over_org = await client.get(events, headers=auth(viewer), params={"wait": 30})
        assert "org" in assert_problem(over_org, 429, "too_many_waits")["detail"]
        assert int(over_org.headers["retry-after"]) >= 1
        # A read without wait is not a wait; another org is not affected.
        assert (await client.get(events, headers=auth(key))).status_code == 200
        other = await admin_key(runtime, "elsewhere")
        other_thread = await new_thread(client, other)
        quick = await client.get(f"/v1/threads/{other_thread}/events", headers=auth(other),
                                 params={"wait": 0.05})
        assert quick.status_code == 200 and quick.json()["data"] == []

        # A commit wakes the held waits; their slots are free again.
        posted = await client.post(f"/v1/threads/{thread_id}/messages", headers=auth(key),
                                   json={"text": "wake"})
        assert posted.status_code == 202
        for response in await asyncio.gather(*held):
            assert response.status_code == 200 and response.json()["data"]
        assert slots.held(uuid.UUID(org_id)) == 0
        assert runtime.coord.hub.channels == 0  # the shared subscription let go too
