"""The console's documents screen in a real browser against a real `ator serve`: an admin
uploads a markdown document, opens it and saves a second version, which is what a search
then finds (version 2, never the old words); a search nothing answers shows under the
unanswered queries; a viewer reads the list and the text but gets no upload form and no save
button."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser

from tests.e2e.browser import browser, log_in, new_context, shot
from tests.e2e.conftest import DeploymentFactory

pytestmark = pytest.mark.e2e
__all__ = ["browser"]


async def test_upload_edit_search_and_unanswered_queries(
    browser: Browser, deployments: DeploymentFactory,
) -> None:
    deployment = deployments()
    replica = deployment.start("docs")
    client = deployment.client(replica)
    viewer_key = (await client.ok("POST", "/v1/api-keys", 201, json={
        "name": "reader", "role": "viewer", "email": "reader@example.com"}))["key"]
    admin_ctx, viewer_ctx = await new_context(browser), await new_context(browser, width=420)
    try:
        page = await log_in(admin_ctx, replica.url, deployment.admin_key, "/documents")
        await page.fill("[data-testid=upload-title]", "Returns manual")
        await page.fill("[data-testid=upload-text]",
                        "# Returns\n\nUnopened parcels come back within thirty days.\n")
        await page.click("[data-testid=upload] >> text=Upload")
        editor = page.locator("[data-testid=document]")
        await editor.wait_for()
        assert "version 1" in await editor.inner_text()
        await page.fill("[data-testid=document-text]",
                        "# Returns\n\nUnopened parcels come back within fourteen days.\n")
        await editor.locator("text=Save as version 2").click()
        await page.locator("[data-testid=document] >> text=Saved as version 2").wait_for()
        await page.locator("[data-testid=documents] >> text=v2").wait_for()  # the list too
        await shot(page, "30-documents")

        await page.fill("[data-testid=search-query]", "parcels days")
        await page.press("[data-testid=search-query]", "Enter")
        results = page.locator("[data-testid=search-results]")
        await results.locator("text=fourteen days").wait_for()
        assert "thirty" not in await results.inner_text()
        assert "v2" in await results.inner_text()
        await page.fill("[data-testid=search-query]", "zeppelin hangar")
        await page.press("[data-testid=search-query]", "Enter")
        await results.locator("text=No document answers this").wait_for()
        await page.reload()
        await page.locator("[data-testid=unanswered] >> text=zeppelin hangar").wait_for()
        await shot(page, "31-documents-search")

        viewer = await log_in(viewer_ctx, replica.url, viewer_key, "/documents")
        await viewer.locator("[data-testid=documents] >> text=Returns manual").click()
        text = viewer.locator("[data-testid=document-text]")
        await text.wait_for()
        assert "fourteen" in await text.input_value()
        assert await viewer.locator("[data-testid=upload]").count() == 0
        assert await viewer.locator("text=Save as version").count() == 0
        await shot(viewer, "32-documents-viewer")
    finally:
        await admin_ctx.close()
        await viewer_ctx.close()
