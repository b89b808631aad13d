"""Workflow runs in the console, in a real browser against a real `ator serve` (issue 20).

A run whose map fans out to 200 items is drawn as a graph of its recipe's steps with the
fan-out as ONE card whose histogram counts move live as the items finish (the page reads the
run once over HTTP, then only the socket's run room); a step's panel loads its output on
demand; and an idle run page makes no HTTP request at all in 20 s.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from playwright.async_api import Browser

from tests.e2e.browser import browser, log_in, new_context, shot
from tests.e2e.conftest import DeploymentFactory

pytestmark = pytest.mark.e2e
__all__ = ["browser"]  # the session's browser fixture, used by the tests below

FAN = {"schema": "ator.workflow/v1", "steps": [
    {"id": "gate", "type": "wait", "seconds": 6},  # the page is open before the fan-out
    # One item at a time: 200 step jobs one after another, so the counts are seen moving.
    {"id": "each", "type": "map", "over": "[1..200]", "concurrency": 1,
     "step": {"type": "transform", "expr": "item * 2"}},
    {"id": "total", "type": "transform", "expr": "$count(steps.each)"}],
    "budget": {"max_steps": 400}}


async def count(page: Any, bucket: str) -> int:
    return int(await page.locator(f"[data-testid=node-each] [data-testid=count-{bucket}]")
               .inner_text())


async def test_a_200_item_map_is_one_card_whose_counts_move_live_and_an_idle_page_is_quiet(
    browser: Browser, deployments: DeploymentFactory,
) -> None:
    deployment = deployments()
    replica = deployment.start("web")
    client = deployment.client(replica)
    wf = await client.ok("POST", "/v1/workflows", 201, json={"name": "fan-out"})
    await client.ok("POST", f"/v1/workflows/{wf['id']}/versions", 201, json={"recipe": FAN})
    run = await client.ok("POST", f"/v1/workflows/{wf['id']}/runs", 201, json={"input": {}})
    context = await new_context(browser)
    try:
        page = await log_in(context, replica.url, deployment.admin_key, f"/runs/{run['id']}")
        await page.wait_for_selector("[data-testid=node-gate]")
        requests: list[str] = []
        page.on("request", lambda r: requests.append(f"{r.method} {r.url}"))
        # The fan-out shows up as one card with a histogram, its counts rising live.
        await page.wait_for_selector("[data-testid=node-each] [data-testid=histogram]",
                                     timeout=60_000)
        await page.wait_for_function(
            "() => { const n = document.querySelector("
            "'[data-testid=node-each] [data-testid=count-done]');"
            " return n && +n.textContent > 0 && +n.textContent < 200; }", timeout=60_000)
        midway = await count(page, "done")
        await shot(page, "20-run-fan-out-midway")
        assert await page.locator("[data-testid^=node-]").count() == 3  # one card per step
        assert await page.locator("[data-testid=histogram]").count() == 1
        await page.wait_for_selector("[data-testid=run-status]:has-text('succeeded')",
                                     timeout=120_000)
        assert await count(page, "done") == 200 > midway
        assert await count(page, "pending") == 0 and await count(page, "failed") == 0
        assert requests == [], requests  # all of it arrived over the socket
        await shot(page, "21-run-fan-out-done")
        # The step panel: the output is loaded when asked for, not before.
        await page.click("[data-testid=node-total]")
        await page.wait_for_selector("[data-testid=step-panel]")
        await page.click("[data-testid=load-output]")
        await page.wait_for_selector("[data-testid=panel-output]:has-text('200')")
        assert [r for r in requests if r.startswith("GET ") and "/steps/" in r]
        requests.clear()
        await asyncio.sleep(20)  # the measurement itself: 20 s of an idle run page
        assert requests == [], requests
        assert await page.locator("[data-testid=connection]").inner_text() == "● live"
    finally:
        await context.close()
