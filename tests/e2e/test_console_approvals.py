"""Approving a held tool call in the console continues the chat (issue 20), in a real browser
(Debian's chromium through playwright) against a real `ator serve`: the pending call appears
on the approvals screen pushed by the org room (no polling), a member approves it there (the
socket's `decide`), the card goes away live, the tool runs once and the conversation goes on
with its result; a viewer sees the screen without the buttons."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser

from tests.e2e.browser import browser, log_in, new_context, shot
from tests.e2e.client import script_setup
from tests.e2e.conftest import DeploymentFactory

pytestmark = pytest.mark.e2e
__all__ = ["browser"]  # the session's browser fixture, used below


async def test_approving_a_pending_tool_call_in_the_console_continues_the_chat(
    browser: Browser, deployments: DeploymentFactory,
) -> None:
    deployment = deployments()
    replica = deployment.start("approvals")
    admin = deployment.client(replica)
    member_key = await admin.ok("POST", "/v1/api-keys", 201, json={
        "name": "member", "role": "member", "email": "member@approvals.test"})
    viewer_key = await admin.ok("POST", "/v1/api-keys", 201, json={
        "name": "viewer", "role": "viewer", "email": "viewer@approvals.test"})
    setup = await admin.create_setup({**script_setup(
        {"tool_calls": [{"name": "calculator", "input": {"expression": "6 * 7"}}]},
        {"text": "The calculator says so."}, name="gated"),
        "tool_policy": {"approve": ["calculator"]}})
    thread = await admin.create_thread(setup["id"], title="Gated")
    member_ctx, viewer_ctx = await new_context(browser), await new_context(browser)
    try:
        page = await log_in(member_ctx, replica.url, member_key["key"], "/approvals")
        viewer = await log_in(viewer_ctx, replica.url, viewer_key["key"], "/approvals")
        await page.wait_for_selector("[data-testid=approvals-empty]")
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))

        await admin.post_message(thread["id"], "What is 6 * 7?")
        held = (await admin.follow(thread["id"]))[-1]
        assert held["data"]["status"] == "waiting"
        action_id = held["data"]["held"][0]["action_id"]
        card = page.locator(f"[data-testid=approval-{action_id}]")
        await card.wait_for()
        assert "calculator" in await card.inner_text()
        assert "6 * 7" in await card.locator("[data-testid=approval-arguments]").input_value()
        # the card came from the org room's push: the one request is the list read it caused
        assert [u for u in requests if "/v1/" in u] == [
            f"{replica.url}/v1/approvals?limit=200"], requests
        await viewer.wait_for_selector(f"[data-testid=approval-{action_id}]")
        assert await viewer.locator("[data-testid=approve]").count() == 0
        await shot(page, "20-approval-pending")

        await card.locator("[data-testid=approve]").click()
        await page.wait_for_selector("[data-testid=approvals-empty]")
        await viewer.wait_for_selector("[data-testid=approvals-empty]")
        events = await admin.follow(thread["id"], after_seq=held["seq"])
        assert events[-1]["data"]["status"] == "done"
        results = [r for e in events if e["kind"] == "tool_results" for r in e["data"]["results"]]
        assert [(r["name"], r["is_error"]) for r in results] == [("calculator", False)]
        assert "42" in results[0]["content"]
        decided = await admin.ok("GET", f"/v1/approvals/{action_id}")
        assert decided["status"] == "approved" and decided["decided_by"] == member_key["user_id"]

        await page.goto(f"{replica.url}/ui/threads/{thread['id']}")
        reply = page.locator("[data-testid=assistant-message]").last
        await reply.wait_for()
        await page.wait_for_selector("text=The calculator says so.")
        link = await page.wait_for_selector(
            "[data-testid=turn-footer][data-status=waiting] [data-testid=held-link]")
        assert "calculator" in await link.inner_text()
        await shot(page, "20-approval-continued")
        turns = await admin.turns(thread["id"])
        assert sorted(t["status"] for t in turns) == ["done", "waiting"]
    finally:
        await member_ctx.close()
        await viewer_ctx.close()
