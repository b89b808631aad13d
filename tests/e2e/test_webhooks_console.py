"""The webhooks screens in a real browser against a real `ator serve` (chromium through
playwright, a loopback receiver that verifies every request with the `standardwebhooks`
library): an admin adds an endpoint and sees its secret once, a test-send shows in the
delivery log as delivered, an endpoint that answers 410 is disabled and named in a banner
with its reason; on the inbound screen an admin adds an endpoint (secret shown once), a
payload the mapping cannot render shows failed with its error, and once the mapping is
fixed a replay from the screen delivers it. A viewer sees the screens without the forms."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime

import pytest
from playwright.async_api import Browser
from standardwebhooks.webhooks import Webhook

from tests.e2e.browser import browser, log_in, new_context, shot
from tests.e2e.client import script_setup
from tests.e2e.conftest import DeploymentFactory
from tests.webhook_receiver import serve_receiver

pytestmark = pytest.mark.e2e
__all__ = ["browser"]  # the session's browser fixture, used below


async def test_the_webhooks_screens(deployments: DeploymentFactory, browser: Browser) -> None:
    async with serve_receiver() as receiver:
        receiver.answers["/gone"] = [410]
        deployment = deployments(ATOR_EGRESS_ALLOW="127.0.0.1", ATOR_JOB_POLL_INTERVAL="0.1")
        replica = deployment.start("hooks-web")
        operator = deployment.client(replica)
        org = await operator.ok("POST", "/v1/orgs", 201, json={"name": f"web-{uuid.uuid4()}"})
        admin_key = (await operator.ok("POST", f"/v1/orgs/{org['id']}/api-keys", 201, json={
            "name": "a", "role": "admin", "email": "a@web.test"}))["key"]
        api = deployment.client(replica, admin_key)
        viewer_key = (await api.ok("POST", "/v1/api-keys", 201, json={
            "name": "v", "role": "viewer", "email": "v@web.test"}))["key"]

        context = await new_context(browser)
        page = await log_in(context, replica.url, admin_key, "/webhooks")
        await page.fill("[data-testid=new-endpoint] input[name=url]", receiver.url("/ok"))
        await page.click("[data-testid=new-endpoint] button[type=submit]")
        secret = (await page.text_content("[data-testid=new-secret]")) or ""
        assert secret.startswith("whsec_")
        await page.click("[data-testid=endpoints] li:has-text('/ok') >> text=Send test")
        [seen] = await receiver.wait_for("/ok", 1)
        assert Webhook(secret).verify(seen.body, seen.headers)["type"] == "webhook.test"
        await page.click("[data-testid=endpoints] li:has-text('/ok') >> text=Deliveries")
        deadline = time.monotonic() + 30
        while "delivered" not in (await page.text_content("[data-testid=deliveries]") or ""):
            assert time.monotonic() < deadline, "the log never showed the delivery"
            await page.click("[data-testid=deliveries] >> text=Refresh")
        await page.click("[data-testid=deliveries] button:has-text('Attempts')")
        assert "200" in (await page.text_content("[data-testid=attempts]") or "")

        gone = await api.ok("POST", "/v1/webhooks/endpoints", 201,
                            json={"url": receiver.url("/gone")})
        await api.ok("POST", f"/v1/webhooks/endpoints/{gone['id']}/test", 202)
        await receiver.wait_for("/gone", 1)
        deadline = time.monotonic() + 30
        while not (await api.ok("GET", f"/v1/webhooks/endpoints/{gone['id']}"))["disabled_at"]:
            assert time.monotonic() < deadline
        await page.reload()
        banner = await page.wait_for_selector("[data-testid=disabled-banner]")
        assert "410" in (await banner.text_content() or "")
        await shot(page, "webhooks-outbound")

        setup = await api.create_setup(script_setup({"text": "ok"}))
        thread = await api.create_thread(setup["id"])
        await page.click("[data-testid=to-inbound]")
        await page.fill("[data-testid=new-inbound] input[name=name]", "tickets")
        await page.fill("[data-testid=new-inbound] textarea[name=mapping]", json.dumps({
            "to": "thread", "thread_id": thread["id"], "text": "$string($number(n))"}))
        await page.click("[data-testid=new-inbound] button[type=submit]")
        shown = (await page.text_content("[data-testid=inbound-secret]")) or ""
        inbound_secret = shown.rsplit(" ", 1)[-1]
        assert inbound_secret.startswith("whsec_")
        [hook] = (await api.ok("GET", "/v1/webhooks/inbound"))["data"]
        body, stamp = json.dumps({"n": "not a number"}), datetime.now(UTC)
        await api.ok("POST", f"/v1/hooks/{hook['id']}", 202, content=body, headers={
            "webhook-id": "msg_web", "webhook-timestamp": str(int(stamp.timestamp())),
            "webhook-signature": Webhook(inbound_secret).sign("msg_web", stamp, body)})
        await page.click("[data-testid=inbound] li:has-text('tickets') >> text=Received")
        deadline = time.monotonic() + 30
        while "failed" not in (await page.text_content("[data-testid=received]") or ""):
            assert time.monotonic() < deadline, "the screen never showed the failure"
            await page.click("[data-testid=received] >> text=Refresh")
        assert "text:" in (await page.text_content("[data-testid=received]") or "")
        await api.ok("PATCH", f"/v1/webhooks/inbound/{hook['id']}", json={"mapping": {
            "to": "thread", "thread_id": thread["id"], "text": '"n is " & n'}})
        await page.click("[data-testid=received] button:has-text('Replay')")
        deadline = time.monotonic() + 30
        while "delivered" not in (await page.text_content("[data-testid=received]") or ""):
            assert time.monotonic() < deadline, "the replay never showed as delivered"
            await page.click("[data-testid=received] >> text=Refresh")
        await shot(page, "webhooks-inbound")
        await context.close()

        viewing = await new_context(browser)
        viewer = await log_in(viewing, replica.url, viewer_key, "/webhooks")
        await viewer.wait_for_selector("[data-testid=endpoints] li:has-text('/ok')")
        assert await viewer.query_selector("[data-testid=new-endpoint]") is None
        assert await viewer.query_selector("text=Rotate secret") is None
        await viewing.close()
