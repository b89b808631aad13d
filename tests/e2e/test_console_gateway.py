"""The console's MCP gateway calls screen in a real browser against a real `ator serve`: an
admin sees the calls a key made through `/mcp` newest first, 50 a page, and pages older and
back; the arguments are shown only as their sha256; a member has no such screen."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

import httpx2
import pytest
from mcp.client.client import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from playwright.async_api import Browser, expect

from tests.e2e.browser import browser, log_in, new_context, shot
from tests.e2e.conftest import DeploymentFactory

pytestmark = pytest.mark.e2e

__all__ = ["browser"]  # the session's browser fixture, used below


def _sha(args: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(args, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


async def test_an_admin_pages_through_the_gateway_calls_and_a_member_has_no_screen(
        deployments: DeploymentFactory, browser: Browser) -> None:
    deployment = deployments(ATOR_RATE_LIMIT_PER_MINUTE="10000")
    replica = deployment.start("console-gateway")
    operator = deployment.client(replica)
    org = await operator.ok("POST", "/v1/orgs", 201, json={"name": f"gw-{uuid.uuid4().hex}"})
    keys = {}
    for role in ("admin", "member"):
        made = await operator.ok("POST", f"/v1/orgs/{org['id']}/api-keys", 201, json={
            "name": f"{role}-key", "role": role, "email": f"{role}@console-gw.test"})
        keys[role] = made["key"]
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {keys['member']}"},
                                  timeout=60) as http, \
            McpClient(streamable_http_client(f"{replica.url}/mcp", http_client=http),
                      mode="auto") as client:
        for i in range(52):
            await client.call_tool("calculator", {"expression": f"{i}+1"})
        await client.call_tool("calculator", {})  # invalid: an error with its code
    context = await new_context(browser)
    page = await log_in(context, replica.url, keys["admin"], "/gateway")
    table = page.locator("[data-testid=gateway-calls]")
    await table.wait_for()
    rows = page.locator("[data-testid=gateway-call]")
    assert await rows.count() == 50
    first = rows.nth(0)
    assert "invalid_arguments" in (await first.text_content() or "")
    assert "member-key" in (await first.text_content() or "")
    second = await rows.nth(1).locator("td").nth(6).get_attribute("title")
    assert second == _sha({"expression": "51+1"})  # newest first, arguments as sha256 only
    assert "51+1" not in (await table.text_content() or "")
    await shot(page, "gateway-calls")
    await page.click("[data-testid=gateway-older]")
    await page.wait_for_selector("text=page 2")
    await expect(rows).to_have_count(3)  # 53 calls: 50, then 3
    assert await page.locator("[data-testid=gateway-older]").is_disabled()
    await page.click("[data-testid=gateway-newer]")
    await expect(rows).to_have_count(50)
    await context.close()
    member = await new_context(browser)
    page = await log_in(member, replica.url, keys["member"])
    assert await page.locator("nav >> text=MCP calls").count() == 0
    await member.close()
