"""Inbound webhooks beyond Standard Webhooks, and mappings written in JSONata (in-process
API, real PostgreSQL, jobs in this process): a GitHub-style HMAC header (hex, `sha256=`) and
a Shopify-style one (base64) and a token in the path each store a good request once (2xx)
and a bad one not at all (401); a per-endpoint size limit is a 413 that stores nothing; a
key reaches the same thread every time and no key makes a thread per request; a workflow
target starts one run per key with the mapped input; requests accepted while no worker runs
reach one thread once one starts; a run the recipe refuses is kept and replays once fixed."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import uuid
from typing import Any

import httpx

from ator import Ator
from ator.analyses import Analyses
from ator.security.redact import scrub_urls
from ator.store import threads as thread_store
from ator.store import webhook_inbound as store
from ator.store.scope import Scope
from ator.workflows import Workflows
from tests.conftest import ended, operator_client, wait_for_event
from tests.webhook_kit import SETTINGS, a_thread, auth, org_admin, signed, until


async def a_setup(client: httpx.AsyncClient, key: str) -> str:
    setup = (await client.post("/v1/setups", headers=auth(key), json={
        "name": f"s-{uuid.uuid4().hex[:6]}", "provider": "scripted", "model": "scripted",
        "config": {"script": [{"text": "ok"}], "repeat_last": True}})).json()
    return str(setup["id"])


async def stored(runtime: Ator, org_id: str, hook: str) -> list[store.Received]:
    return await store.list_received(runtime.db, Scope(uuid.UUID(org_id)), uuid.UUID(hook))


async def messages(runtime: Ator, org_id: str, thread_id: str, text: str) -> int:
    """How many messages of the thread say `text`, once one does and its turn ended."""
    scope, thread = Scope(uuid.UUID(org_id)), uuid.UUID(thread_id)
    said = await wait_for_event(runtime, scope, thread, lambda e: text in json.dumps(e.data))
    await wait_for_event(runtime, scope, thread, ended, after_seq=said.seq)
    events = await runtime.events(scope, thread)
    return sum(text in json.dumps(e.data) for e in events if e.kind == "message")


async def delivered(runtime: Ator, org_id: str, received_id: str) -> store.Received:
    scope = Scope(uuid.UUID(org_id))

    async def settled() -> bool:
        row = await store.get_received(runtime.db, scope, uuid.UUID(received_id))
        return row is not None and row.status in ("delivered", "failed")
    await until(settled)
    row = await store.get_received(runtime.db, scope, uuid.UUID(received_id))
    assert row is not None
    return row


async def test_hmac_header_hex_with_prefix_and_base64(make_ator: Any) -> None:
    async with operator_client(make_ator, **SETTINGS) as (client, operator, runtime):
        await runtime.start_jobs()
        org_id, a = await org_admin(client, operator)
        thread_id = await a_thread(client, a)
        github = await client.post("/v1/webhooks/inbound", headers=auth(a), json={
            "name": "github", "secret": "it-is-a-shared-secret",
            "verification": {"method": "hmac", "header": "X-Hub-Signature-256",
                             "prefix": "sha256=", "id_header": "X-GitHub-Delivery"},
            "mapping": {"to": "thread", "thread_id": thread_id,
                        "text": '"push to " & repository.name'}})
        assert github.status_code == 201, github.text
        hook = github.json()["id"]
        assert github.json()["secret"] == "it-is-a-shared-secret"
        body = json.dumps({"repository": {"name": "ator"}}).encode()
        good = "sha256=" + hmac.new(b"it-is-a-shared-secret", body, hashlib.sha256).hexdigest()
        bad = "sha256=" + hmac.new(b"another-secret-entirely", body,
                                   hashlib.sha256).hexdigest()
        for signature in (bad, good.removeprefix("sha256="), ""):
            refused = await client.post(f"/v1/hooks/{hook}", content=body, headers={
                "x-hub-signature-256": signature, "x-github-delivery": "d-1"})
            assert refused.status_code == 401, refused.text
            assert refused.json()["code"] == "webhook_signature_invalid"
        assert await stored(runtime, org_id, hook) == []
        answers = [await client.post(f"/v1/hooks/{hook}", content=body, headers={
            "x-hub-signature-256": good, "x-github-delivery": "d-1"}) for _ in range(2)]
        assert [r.status_code for r in answers] == [202, 202]
        assert [r.json()["duplicate"] for r in answers] == [False, True]
        [row] = await stored(runtime, org_id, hook)
        assert row.webhook_id == "d-1" and row.body == body
        assert (await delivered(runtime, org_id, str(row.id))).status == "delivered"
        assert await messages(runtime, org_id, thread_id, "push to ator") == 1

        shop = (await client.post("/v1/webhooks/inbound", headers=auth(a), json={
            "name": "shop", "verification": {"method": "hmac", "header": "X-Shop-Hmac",
                                             "encoding": "base64"},
            "mapping": {"to": "thread", "thread_id": thread_id, "text": "$string(n)"}})).json()
        secret = shop["secret"]
        body = b'{"n": 5}'
        sig = base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest())
        assert (await client.post(f"/v1/hooks/{shop['id']}", content=body, headers={
            "x-shop-hmac": base64.b64encode(b"x" * 32).decode()})).status_code == 401
        assert await stored(runtime, org_id, shop["id"]) == []
        ok = await client.post(f"/v1/hooks/{shop['id']}", content=body,
                               headers={"x-shop-hmac": sig.decode()})
        assert ok.status_code == 202 and ok.json()["webhook_id"].startswith("sha256:")
        # No id header: the same body again is the same request.
        again = await client.post(f"/v1/hooks/{shop['id']}", content=body,
                                  headers={"x-shop-hmac": sig.decode()})
        assert again.json()["duplicate"] is True
        assert len(await stored(runtime, org_id, shop["id"])) == 1

        invalid = await client.post("/v1/webhooks/inbound", headers=auth(a), json={
            "name": "x", "verification": {"method": "hmac"},
            "mapping": {"to": "thread", "thread_id": thread_id, "text": "1"}})
        assert invalid.status_code == 422
        assert invalid.json()["code"] == "webhook_verification_invalid"


async def test_a_token_in_the_path_and_a_size_limit(make_ator: Any) -> None:
    async with operator_client(make_ator, **SETTINGS) as (client, operator, runtime):
        await runtime.start_jobs()
        org_id, a = await org_admin(client, operator)
        thread_id = await a_thread(client, a)
        made = await client.post("/v1/webhooks/inbound", headers=auth(a), json={
            "name": "plain", "verification": {"method": "token"}, "max_bytes": 100,
            "mapping": {"to": "thread", "thread_id": thread_id, "text": '"alert: " & what'}})
        assert made.status_code == 201, made.text
        hook, token = made.json()["id"], made.json()["token"]
        assert made.json()["url"] == f"/v1/hooks/{hook}/{token}" and "secret" not in made.json()
        shown = (await client.get(f"/v1/webhooks/inbound/{hook}", headers=auth(a))).json()
        assert token not in json.dumps(shown)
        # The token is a secret: an access log line of the request does not keep it.
        logged = scrub_urls(f'127.0.0.1:5 - "POST /v1/hooks/{hook}/{token} HTTP/1.1" 202')
        assert token not in logged and f"/v1/hooks/{hook}/[redacted]" in logged
        body = b'{"what": "disk full"}'
        for path in (f"/v1/hooks/{hook}", f"/v1/hooks/{hook}/{token[:-1]}x"):
            refused = await client.post(path, content=body)
            assert refused.status_code == 401, (path, refused.text)
        big = await client.post(f"/v1/hooks/{hook}/{token}",
                                content=json.dumps({"what": "x" * 200}).encode())
        assert big.status_code == 413 and big.json()["code"] == "payload_too_large"
        assert await stored(runtime, org_id, hook) == []
        ok = await client.post(f"/v1/hooks/{hook}/{token}", content=body)
        assert ok.status_code == 202, ok.text
        await delivered(runtime, org_id, ok.json()["id"])
        assert await messages(runtime, org_id, thread_id, "alert: disk full") == 1
        too_big = await client.patch(f"/v1/webhooks/inbound/{hook}", headers=auth(a),
                                     json={"max_bytes": 10**9})
        assert too_big.status_code == 422


async def test_a_key_reaches_the_same_thread_and_no_key_a_new_one(make_ator: Any) -> None:
    async with operator_client(make_ator, **SETTINGS) as (client, operator, runtime):
        await runtime.start_jobs()
        org_id, a = await org_admin(client, operator)
        setup_id = await a_setup(client, a)
        keyed = (await client.post("/v1/webhooks/inbound", headers=auth(a), json={
            "name": "tickets", "mapping": {
                "to": "thread", "setup_id": setup_id, "key": "ticket.id",
                "title": '"Ticket " & ticket.id', "text": "ticket.note"}})).json()
        notes = [("T1", "first"), ("T2", "other"), ("T1", "second")]
        ids = []
        for n, (ticket, note) in enumerate(notes):
            body, headers = signed(keyed["secret"], f"msg_k{n}_{uuid.uuid4().hex}",
                                   {"ticket": {"id": ticket, "note": note}})
            answer = await client.post(f"/v1/hooks/{keyed['id']}", content=body,
                                       headers=headers)
            assert answer.status_code == 202
            ids.append(answer.json()["id"])
        rows = [await delivered(runtime, org_id, i) for i in ids]
        assert [r.status for r in rows] == ["delivered"] * 3
        threads = [r.result["thread_id"] for r in rows if r.result]
        assert threads[0] == threads[2] != threads[1]
        scope = Scope(uuid.UUID(org_id))
        made = await thread_store.get_thread(runtime.db, scope, uuid.UUID(threads[0]))
        assert made.title == "Ticket T1" and str(made.setup_id) == setup_id
        for note in ("first", "second"):
            assert await messages(runtime, org_id, threads[0], note) == 1
        assert await messages(runtime, org_id, threads[1], "other") == 1

        fresh = (await client.post("/v1/webhooks/inbound", headers=auth(a), json={
            "name": "each", "mapping": {"to": "thread", "setup_id": setup_id,
                                        "text": "note"}})).json()
        made_threads = set()
        for n in range(2):
            body, headers = signed(fresh["secret"], f"msg_f{n}", {"note": f"n{n}"})
            answer = await client.post(f"/v1/hooks/{fresh['id']}", content=body,
                                       headers=headers)
            row = await delivered(runtime, org_id, answer.json()["id"])
            assert row.result is not None
            made_threads.add(row.result["thread_id"])
        assert len(made_threads) == 2
        both = await client.post("/v1/webhooks/inbound", headers=auth(a), json={
            "name": "bad", "mapping": {"to": "thread", "setup_id": setup_id,
                                       "thread_id": made.id.hex, "text": "1"}})
        assert both.status_code == 422 and both.json()["code"] == "webhook_mapping_invalid"
        unparsable = await client.post("/v1/webhooks/inbound", headers=auth(a), json={
            "name": "bad", "mapping": {"to": "thread", "setup_id": setup_id, "text": "((("}})
        assert unparsable.status_code == 422


async def test_accepted_while_no_worker_runs_five_sends_one_thread_message(
        make_ator: Any) -> None:
    async with operator_client(make_ator, **SETTINGS) as (client, operator, runtime):
        org_id, a = await org_admin(client, operator)
        setup_id = await a_setup(client, a)
        made = (await client.post("/v1/webhooks/inbound", headers=auth(a), json={
            "name": "orders", "mapping": {"to": "thread", "setup_id": setup_id,
                                          "key": "order", "text": '"order " & order'}})).json()
        body, headers = signed(made["secret"], f"msg_{uuid.uuid4().hex}", {"order": "o-9"})
        answers = [await client.post(f"/v1/hooks/{made['id']}", content=body, headers=headers)
                   for _ in range(5)]
        assert [r.status_code for r in answers] == [202] * 5
        assert [r.json()["duplicate"] for r in answers] == [False] + [True] * 4
        [row] = await stored(runtime, org_id, made["id"])
        assert row.status == "received"  # kept; no worker has run it
        await runtime.start_jobs()
        row = await delivered(runtime, org_id, str(row.id))
        assert row.result is not None
        thread_id = row.result["thread_id"]
        await wait_for_event(runtime, Scope(uuid.UUID(org_id)), uuid.UUID(thread_id), ended)
        assert await messages(runtime, org_id, thread_id, "order o-9") == 1


RECIPE = {"schema": "ator.workflow/v1",
          "input": {"type": "object", "required": ["amount"],
                    "properties": {"amount": {"type": "number"}}},
          "steps": [{"id": "double", "type": "transform", "expr": "input.amount * 2"}]}


async def test_a_workflow_run_per_key_and_a_refused_input_replays(make_ator: Any) -> None:
    async with operator_client(make_ator, **SETTINGS) as (client, operator, runtime):
        await runtime.start_jobs()
        org_id, a = await org_admin(client, operator)
        scope = Scope(uuid.UUID(org_id))
        flows = runtime.service(Workflows)
        workflow = await flows.create(scope, "payments")
        await flows.publish(scope, workflow["id"], RECIPE)
        made = (await client.post("/v1/webhooks/inbound", headers=auth(a), json={
            "name": "pay", "mapping": {"to": "workflow", "workflow_id": str(workflow["id"]),
                                       "input": '{"amount": $number(total)}',
                                       "key": "payment"}})).json()
        ids = []
        for n in range(5):  # five different requests, one payment key: one run
            body, headers = signed(made["secret"], f"msg_p{n}", {"payment": "p1", "total": 21})
            ids.append((await client.post(f"/v1/hooks/{made['id']}", content=body,
                                          headers=headers)).json()["id"])
        rows = [await delivered(runtime, org_id, i) for i in ids]
        runs = {r.result["run_id"] for r in rows if r.result}
        assert [r.status for r in rows] == ["delivered"] * 5 and len(runs) == 1
        [run_id] = runs

        async def succeeded() -> bool:
            return (await flows.run(scope, uuid.UUID(run_id)))["status"] == "succeeded"
        await until(succeeded)
        assert (await flows.run(scope, uuid.UUID(run_id)))["output"] == 42

        body, headers = signed(made["secret"], "msg_refused", {"payment": "p2"})
        refused = (await client.post(f"/v1/hooks/{made['id']}", content=body,
                                     headers=headers)).json()
        row = await delivered(runtime, org_id, refused["id"])
        assert row.status == "failed" and "run could not start" in (row.error or "")
        fixed = await client.patch(f"/v1/webhooks/inbound/{made['id']}", headers=auth(a), json={
            "mapping": {"to": "workflow", "workflow_id": str(workflow["id"]),
                        "input": '{"amount": 1}', "key": "payment"}})
        assert fixed.status_code == 200, fixed.text
        shown = await client.get(f"/v1/webhooks/inbound/received/{refused['id']}",
                                 headers=auth(a))
        assert shown.json()["status"] == "failed" and shown.json()["body"] == body.decode()
        assert (await client.post(f"/v1/webhooks/inbound/received/{refused['id']}/replay",
                                  headers=auth(a))).status_code == 202
        row = await delivered(runtime, org_id, refused["id"])
        assert row.status == "delivered" and row.result is not None
        assert row.result["run_id"] != run_id
        listed = (await client.get(f"/v1/webhooks/inbound/{made['id']}/received",
                                   headers=auth(a))).json()["data"]
        assert len(listed) == 6 and "body" not in listed[0]


async def test_ten_requests_with_one_key_at_once_reach_one_thread(make_ator: Any) -> None:
    async with operator_client(make_ator, **SETTINGS) as (client, operator, runtime):
        org_id, a = await org_admin(client, operator)
        setup_id = await a_setup(client, a)
        made = (await client.post("/v1/webhooks/inbound", headers=auth(a), json={
            "name": "burst", "mapping": {"to": "thread", "setup_id": setup_id,
                                         "key": "'same'", "text": '"note " & $string(n)'}})
                ).json()
        sends = [signed(made["secret"], f"msg_same_{n}", {"n": n}) for n in range(10)]
        answers = await asyncio.gather(*(client.post(f"/v1/hooks/{made['id']}", content=body,
                                                     headers=headers)
                                         for body, headers in sends))
        assert [r.status_code for r in answers] == [202] * 10
        await runtime.start_jobs()  # ten jobs queued at once, taken together by one worker
        rows = [await delivered(runtime, org_id, r.json()["id"]) for r in answers]
        assert {r.status for r in rows} == {"delivered"}
        assert len({r.result["thread_id"] for r in rows if r.result}) == 1
        threads = await thread_store.list_threads(runtime.db, Scope(uuid.UUID(org_id)),
                                                  setup_id=uuid.UUID(setup_id))
        assert len(threads) == 1


NOTE_KIND = {"input": {"source": "payload"}, "key_fields": ["customer", "amount"],
             "model": {"provider": "scripted", "model": "scripted",
                       "config": {"script": [{"text": '{"risk": "high"}'}],
                                  "repeat_last": True}},
             "output_schema": {"type": "object", "required": ["risk"],
                               "properties": {"risk": {"type": "string"}}},
             "rule": {"output": {"risk": "unknown"}}}


async def test_a_webhook_arriving_triggers_an_analysis_of_its_target(make_ator: Any) -> None:
    async with operator_client(make_ator, **SETTINGS) as (client, operator, runtime):
        await runtime.start_jobs()
        org_id, a = await org_admin(client, operator)
        put = await client.put("/v1/analyses/kinds/order_risk", headers=auth(a),
                               json={"spec": NOTE_KIND})
        assert put.status_code in (200, 201), put.text
        unknown = await client.post("/v1/webhooks/inbound", headers=auth(a), json={
            "name": "x", "mapping": {"to": "analysis", "kind": "no_such_kind",
                                     "target": "customer"}})
        assert unknown.status_code == 404, unknown.text
        made = (await client.post("/v1/webhooks/inbound", headers=auth(a), json={
            "name": "orders", "mapping": {"to": "analysis", "kind": "order_risk",
                                          "target": '"customer:" & customer',
                                          "input": '{"customer": customer, '
                                                   '"amount": total}'}})).json()
        assert "id" in made, made

        async def analyses() -> list[dict[str, Any]]:
            got = (await client.get("/v1/analyses", headers=auth(a),
                                    params={"kind": "order_risk"})).json()
            return list(got["data"])

        async def send(n: int) -> store.Received:
            body, headers = signed(made["secret"], f"msg_r{n}",
                                   {"customer": "c-7", "total": 99, "noise": n})
            sent = await client.post(f"/v1/hooks/{made['id']}", content=body, headers=headers)
            assert sent.status_code == 202, sent.text
            return await delivered(runtime, org_id, sent.json()["id"])

        first = await send(0)
        assert first.status == "delivered" and first.result is not None, first.error
        assert first.result["target"] == "customer:c-7"

        async def one() -> bool:
            return len(await analyses()) == 1
        await until(one)
        [made_one] = await analyses()
        assert made_one["target"] == "customer:c-7" and made_one["model"] == "scripted"
        # The same order again (another webhook id, other noise): the analysis's hash of its
        # key fields serves it from the cache, no second model call, no second record.
        second = await send(1)
        assert second.status == "delivered", second.error
        scope = Scope(uuid.UUID(org_id))

        async def hit() -> bool:
            stats = await runtime.service(Analyses).stats(scope)
            return any(s.get("cache_hits") for s in stats)
        await until(hit)
        assert len(await analyses()) == 1
