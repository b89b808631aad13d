"""Webhooks over the HTTP API (in-process ASGI, real PostgreSQL, jobs running): outbound
endpoints by role and org with problem+json refusals and the secret shown once, the delivery
log and replay routes, and inbound `/v1/hooks/{id}`: signed with the `standardwebhooks`
library, the same webhook id five times is one thread message, a bad signature is 401 and
stores nothing, an oversized body is 413, another org's endpoint is a 404, and a payload the
mapping cannot render is kept and replays after the mapping is fixed."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from ator import Ator
from ator.store import webhook_inbound as store
from ator.store.scope import Scope
from ator.webhooks import InboundHooks
from tests.conftest import ended, operator_client, wait_for_event
from tests.webhook_kit import SETTINGS, a_thread, auth, org_admin, signed


@pytest.fixture
async def api(make_ator: Any) -> AsyncIterator[tuple[httpx.AsyncClient, str, Ator]]:
    async with operator_client(make_ator, **SETTINGS) as made:
        await made[2].start_jobs()
        yield made


async def test_outbound_endpoints_by_role_and_org(api: Any) -> None:
    client, operator, _ = api
    _, a = await org_admin(client, operator)
    _, b = await org_admin(client, operator)
    refused = await client.post("/v1/webhooks/endpoints", headers=auth(a),
                                json={"url": "https://10.1.2.3/hook"})
    assert refused.status_code == 422
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["code"] == "webhook_url_refused"
    unknown = await client.post("/v1/webhooks/endpoints", headers=auth(a),
                                json={"url": "http://127.0.0.1:9/h", "color": "red"})
    assert unknown.status_code == 422
    made = await client.post("/v1/webhooks/endpoints", headers=auth(a), json={
        "url": "http://127.0.0.1:9/h", "event_types": ["turn.ended"]})
    assert made.status_code == 201, made.text
    assert made.json()["secret"].startswith("whsec_")
    eid = made.json()["id"]
    shown = await client.get(f"/v1/webhooks/endpoints/{eid}", headers=auth(a))
    assert shown.status_code == 200 and "secret" not in shown.json()
    listed = (await client.get("/v1/webhooks/endpoints", headers=auth(a))).json()["data"]
    assert [e["id"] for e in listed] == [eid] and "secret" not in listed[0]
    assert (await client.get(f"/v1/webhooks/endpoints/{eid}/deliveries",
                             headers=auth(a))).json() == {"data": []}
    rotated = await client.post(f"/v1/webhooks/endpoints/{eid}/rotate-secret",
                                headers=auth(a), json={"overlap_s": 60})
    assert rotated.status_code == 200 and rotated.json()["secret"].startswith("whsec_")
    assert rotated.json()["secret"] != made.json()["secret"]
    assert rotated.json()["previous_secret_until"] is not None
    too_long = await client.post(f"/v1/webhooks/endpoints/{eid}/rotate-secret",
                                 headers=auth(a), json={"overlap_s": 10**9})
    assert too_long.status_code == 422
    sent = await client.post(f"/v1/webhooks/endpoints/{eid}/test", headers=auth(a))
    assert sent.status_code == 202
    shown_delivery = await client.get(f"/v1/webhooks/deliveries/{sent.json()['delivery_id']}",
                                      headers=auth(a))
    assert shown_delivery.json()["event_type"] == "webhook.test"
    for path in (f"/v1/webhooks/endpoints/{eid}/test",
                 f"/v1/webhooks/deliveries/{sent.json()['delivery_id']}/replay"):
        assert (await client.post(path, headers=auth(b))).status_code == 404
    for path in (f"/v1/webhooks/endpoints/{eid}", f"/v1/webhooks/endpoints/{eid}/deliveries"):
        assert (await client.get(path, headers=auth(b))).status_code == 404
    assert (await client.delete(f"/v1/webhooks/endpoints/{eid}",
                                headers=auth(b))).status_code == 404
    missing = await client.post(f"/v1/webhooks/deliveries/{uuid.uuid4()}/replay",
                                headers=auth(a))
    assert missing.status_code == 404
    assert missing.json()["code"] == "not_found"
    assert (await client.delete(f"/v1/webhooks/endpoints/{eid}",
                                headers=auth(a))).status_code == 204


async def test_inbound_is_one_message_per_webhook_id_and_401_stores_nothing(api: Any) -> None:
    client, operator, runtime = api
    org_id, a = await org_admin(client, operator)
    _, b = await org_admin(client, operator)
    thread_id = await a_thread(client, a)
    made = await client.post("/v1/webhooks/inbound", headers=auth(a), json={
        "name": "orders", "mapping": {
            "to": "thread", "thread_id": thread_id,
            "text": '"Order " & $string(order.id) & " says: " & note'}})
    assert made.status_code == 201, made.text
    hook, secret = made.json()["id"], made.json()["secret"]
    assert (await client.get(f"/v1/webhooks/inbound/{hook}", headers=auth(b))).status_code \
        == 404
    other_thread = await a_thread(client, b)
    cross = await client.post("/v1/webhooks/inbound", headers=auth(b), json={
        "name": "x", "mapping": {"to": "thread", "thread_id": thread_id, "text": "a"}})
    assert cross.status_code == 404 and other_thread

    msg_id = f"msg_{uuid.uuid4().hex}"
    body, headers = signed(secret, msg_id, {"order": {"id": 42}, "note": "ship it"})
    # A bad signature first, with the same id: 401, and it stores nothing (the good one
    # after it is not a duplicate).
    bad = await client.post(f"/v1/hooks/{hook}", content=body,
                            headers={**headers, "webhook-signature": "v1,AAAA"})
    assert bad.status_code == 401 and bad.json()["code"] == "webhook_signature_invalid"
    stale = signed(secret, msg_id, {"x": 1})[1]
    stale["webhook-timestamp"] = str(int(time.time()) - 3600)
    assert (await client.post(f"/v1/hooks/{hook}", content=body,
                              headers=stale)).status_code == 401
    answers = [await client.post(f"/v1/hooks/{hook}", content=body, headers=headers)
               for _ in range(5)]
    assert [r.status_code for r in answers] == [202] * 5
    assert [r.json()["duplicate"] for r in answers] == [False, True, True, True, True]

    scope = Scope(uuid.UUID(org_id))
    event = await wait_for_event(runtime, scope, uuid.UUID(thread_id), ended)
    events = await runtime.events(scope, uuid.UUID(thread_id))
    texts = [e for e in events if "Order 42 says: ship it" in json.dumps(e.data)]
    assert len(texts) == 1 and event.seq > texts[0].seq

    assert (await client.post(f"/v1/hooks/{uuid.uuid4()}", content=body,
                              headers=headers)).status_code == 404
    big = signed(secret, "msg_big", {"pad": "x" * 5000})
    assert (await client.post(f"/v1/hooks/{hook}", content=big[0],
                              headers=big[1])).status_code == 413


async def test_a_payload_the_mapping_cannot_render_is_kept_and_replays(api: Any) -> None:
    client, operator, runtime = api
    org_id, a = await org_admin(client, operator)
    thread_id = await a_thread(client, a)
    made = (await client.post("/v1/webhooks/inbound", headers=auth(a), json={
        "name": "n", "mapping": {"to": "thread", "thread_id": thread_id,
                                 "text": '"Ticket " & $string($number(title))'}}
    )).json()
    body, headers = signed(made["secret"], f"msg_{uuid.uuid4().hex}", {"title": "printer"})
    first = await client.post(f"/v1/hooks/{made['id']}", content=body, headers=headers)
    assert first.status_code == 202
    received = first.json()["id"]

    hooks = runtime.service(InboundHooks)
    scope = Scope(uuid.UUID(org_id))

    async def state() -> str | None:
        row = await store.get_received(runtime.db, scope, uuid.UUID(received))
        return row.status if row else None
    deadline = time.monotonic() + 20
    while await state() != "failed":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    row = await store.get_received(runtime.db, scope, uuid.UUID(received))
    assert row is not None and row.error and row.error.startswith("text:")
    assert row.body == body  # kept raw

    fixed = await client.patch(f"/v1/webhooks/inbound/{made['id']}", headers=auth(a),
                               json={"mapping": {"to": "thread", "thread_id": thread_id,
                                                 "text": '"Ticket " & title'}})
    assert fixed.status_code == 200, fixed.text
    replay = await client.post(f"/v1/webhooks/inbound/received/{received}/replay",
                               headers=auth(a))
    assert replay.status_code == 202
    await wait_for_event(runtime, scope, uuid.UUID(thread_id), ended)
    events = await runtime.events(scope, uuid.UUID(thread_id))
    assert sum("Ticket printer" in json.dumps(e.data) for e in events) == 1
    assert (await hooks.get(scope, uuid.UUID(made["id"]))).mapping["text"] == '"Ticket " & title'



async def test_inbound_accepted_while_no_worker_runs_is_delivered_once_one_starts(
        make_ator: Any) -> None:
    async with operator_client(make_ator, **SETTINGS) as (client, operator, runtime):
        org_id, a = await org_admin(client, operator)
        thread_id = await a_thread(client, a)
        made = (await client.post("/v1/webhooks/inbound", headers=auth(a), json={
            "name": "n", "mapping": {"to": "thread", "thread_id": thread_id,
                                     "text": '"ping " & $string(n)'}})).json()
        body, headers = signed(made["secret"], f"msg_{uuid.uuid4().hex}", {"n": 7})
        answer = await client.post(f"/v1/hooks/{made['id']}", content=body, headers=headers)
        assert answer.status_code == 202
        scope = Scope(uuid.UUID(org_id))
        row = await store.get_received(runtime.db, scope, uuid.UUID(answer.json()["id"]))
        assert row is not None and row.status == "received"  # kept; nothing ran it yet
        assert not any("ping 7" in json.dumps(e.data)
                       for e in await runtime.events(scope, uuid.UUID(thread_id)))
        await runtime.start_jobs()
        await wait_for_event(runtime, scope, uuid.UUID(thread_id), ended)
        events = await runtime.events(scope, uuid.UUID(thread_id))
        assert sum("ping 7" in json.dumps(e.data) for e in events) == 1
