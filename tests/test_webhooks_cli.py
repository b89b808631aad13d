"""`ator webhooks ...` over the HTTP API (the commands' async cores against the app
in-process, real PostgreSQL, jobs running): an admin registers, updates, disables and
enables an endpoint, reads its deliveries and replays one; a member is refused with the
server's problem code; an inbound endpoint is made, fails a payload, is fixed and replayed."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from ator.api.app import create_app
from ator.cli import webhooks as cli
from ator.cli.remote import ApiClient, RemoteError
from tests.conftest import operator_client
from tests.webhook_kit import SETTINGS, a_thread, auth, org_admin, signed, until


async def test_the_webhooks_cli_manages_both_sides(make_ator: Any) -> None:
    async with operator_client(make_ator, **{**SETTINGS, "webhook_retry_delays": (0.05,)}) \
            as (client, operator, runtime):
        await runtime.start_jobs()
        _, admin = await org_admin(client, operator)
        member = (await client.post("/v1/api-keys", headers=auth(admin), json={
            "name": "m", "role": "member", "email": f"{uuid.uuid4().hex[:6]}@m"})).json()["key"]
        app = create_app(runtime.settings, runtime=runtime)
        app.state.ator = runtime
        as_admin = ApiClient("http://ator", admin, transport=httpx.ASGITransport(app=app))
        as_member = ApiClient("http://ator", member, transport=httpx.ASGITransport(app=app))
        try:
            with pytest.raises(RemoteError) as refused:
                await cli.create_endpoint(as_member, "http://127.0.0.1:9/h", [], "")
            assert refused.value.code == "forbidden"
            with pytest.raises(RemoteError) as unknown:
                await cli.create_endpoint(as_admin, "http://127.0.0.1:9/h", ["nope"], "")
            assert unknown.value.code == "webhook_event_type_unknown"
            made = await cli.create_endpoint(as_admin, "http://127.0.0.1:9/h",
                                             ["turn.ended"], "ops")
            assert made["secret"].startswith("whsec_")
            changed = await cli.update_endpoint(as_admin, made["id"], description="pager",
                                                event_types=["run.ended", "turn.ended"])
            assert changed["description"] == "pager"
            assert changed["event_types"] == ["run.ended", "turn.ended"]
            off = await cli.update_endpoint(as_admin, made["id"], enabled=False)
            assert off["enabled"] is False and off["disabled_reason"] == "disabled by an admin"
            on = await cli.update_endpoint(as_admin, made["id"], enabled=True)
            assert on["enabled"] is True and on["disabled_at"] is None
            sent = await as_admin.post(f"/v1/webhooks/endpoints/{made['id']}/test", {})

            async def finished() -> bool:
                found = await cli.delivery(as_admin, sent["delivery_id"])
                return bool(found["status"] != "pending")
            await until(finished)  # port 9 answers nothing: retried once, then failed
            [listed] = (await cli.deliveries(as_member, made["id"], 10))["data"]
            assert listed["status"] == "failed"
            assert len((await cli.delivery(as_member, listed["id"]))["log"]) >= 1
            assert (await cli.replay(as_admin, listed["id"]))["status"] == "pending"

            thread_id = await a_thread(client, admin)
            inbound = await cli.create_inbound(as_admin, "orders", {
                "to": "thread", "thread_id": thread_id, "text": "$string($number(n))"})
            body, headers = signed(inbound["secret"], "msg_cli", {"n": "not a number"})
            taken = (await client.post(f"/v1/hooks/{inbound['id']}", content=body,
                                       headers=headers)).json()

            async def failed() -> bool:
                rows = (await cli.received(as_member, inbound["id"], 10))["data"]
                return bool(rows and rows[0]["status"] == "failed")
            await until(failed)
            with pytest.raises(RemoteError) as viewer_replay:
                await cli.replay_received(as_member, taken["id"])
            assert viewer_replay.value.code == "forbidden"
            await cli.update_inbound(as_admin, inbound["id"], mapping={
                "to": "thread", "thread_id": thread_id, "text": '"n is " & n'})
            assert (await cli.replay_received(as_admin, taken["id"]))["status"] == "received"

            async def done() -> bool:
                rows = (await cli.received(as_member, inbound["id"], 10))["data"]
                return bool(rows[0]["status"] == "delivered")
            await until(done)
        finally:
            await as_admin.aclose()
            await as_member.aclose()
