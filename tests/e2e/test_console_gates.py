"""Deciding a workflow's human gate in the console continues the run (issue 20), in a real
browser (Debian's chromium through playwright) against a real `ator serve`: the run page
shows the open gate's prompt (the run `waiting`), a member decides it there over the socket,
the form goes away live and the run goes on to succeed with the decided value."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser

from tests.e2e.browser import browser, log_in, new_context, shot
from tests.e2e.conftest import DeploymentFactory

pytestmark = pytest.mark.e2e
__all__ = ["browser"]  # the session's browser fixture, used below

GATED = {"schema": "ator.workflow/v1", "steps": [
    {"id": "pause", "type": "wait", "seconds": 2},  # the page is open before the gate
    {"id": "ok", "type": "human", "prompt": "Ship version 2 to production?",
     "input_schema": {"type": "object", "required": ["ship"],
                      "properties": {"ship": {"type": "boolean"}}}},
    {"id": "after", "type": "transform", "expr": "{'shipped': steps.ok.ship}"}]}


async def test_deciding_a_gate_in_the_console_continues_the_run(
    browser: Browser, deployments: DeploymentFactory,
) -> None:
    deployment = deployments()
    replica = deployment.start("gates")
    admin = deployment.client(replica)
    member = await admin.ok("POST", "/v1/api-keys", 201, json={
        "name": "member", "role": "member", "email": "member@gates.test"})
    wf = await admin.ok("POST", "/v1/workflows", 201, json={"name": "gated"})
    await admin.ok("POST", f"/v1/workflows/{wf['id']}/versions", 201, json={"recipe": GATED})
    run = await admin.ok("POST", f"/v1/workflows/{wf['id']}/runs", 201, json={"input": {}})
    context = await new_context(browser)
    try:
        page = await log_in(context, replica.url, member["key"], f"/runs/{run['id']}")
        await page.wait_for_selector("[data-testid=node-ok]")
        # The gate opens while the page is open: it arrives over the run room.
        await page.wait_for_selector("[data-testid=gate]", timeout=60_000)
        assert "Ship version 2" in await page.locator("[data-testid=gate-prompt]").inner_text()
        await page.wait_for_selector("[data-testid=run-status]:has-text('waiting')")
        await shot(page, "20-run-gate-open")
        # A value the input schema refuses is answered, and nothing is decided.
        await page.fill("[data-testid=gate-value]", '{"ship": "yes"}')
        await page.click("[data-testid=gate-approve]")
        await page.wait_for_selector("[data-testid=gate-error]")
        await page.fill("[data-testid=gate-value]", '{"ship": true}')
        await page.click("[data-testid=gate-approve]")
        await page.wait_for_selector("[data-testid=run-status]:has-text('succeeded')",
                                     timeout=60_000)
        assert await page.locator("[data-testid=gate]").count() == 0
        done = await admin.ok("GET", f"/v1/runs/{run['id']}")
        assert done["status"] == "succeeded" and done["output"] == {"shipped": True}
        await shot(page, "21-run-gate-decided")
    finally:
        await context.close()
