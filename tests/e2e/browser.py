"""A real browser for the console's tests (layer: tests; imports playwright).

Debian's chromium (`/usr/bin/chromium`, installed by `.ci/run` with apt) driven by Python
playwright, one browser per test session; each test opens its own contexts (a context is a
separate cookie jar: another person, or another tab of a new session). Screenshots go to
`SHOTS` (ATOR_SCREENSHOTS or a temp dir) so a person can look at what each screen shows.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, BrowserContext, Page, async_playwright

__all__ = ["SHOTS", "browser", "log_in", "new_context", "shot"]

CHROMIUM = os.environ.get("ATOR_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = Path(os.environ.get("ATOR_SCREENSHOTS") or tempfile.mkdtemp(prefix="ator-shots-"))
DIST = Path(__file__).resolve().parents[2] / "src" / "ator" / "web" / "dist" / "index.html"


def _check_installed() -> None:
    assert DIST.is_file(), "the console is not built: run `make install` (npm ci && npm run build)"
    assert Path(CHROMIUM).exists(), "no chromium: apt-get install -y chromium (.ci/run does)"


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    _check_installed()
    async with async_playwright() as p:
        launched = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        await launched.close()


async def new_context(browser: Browser, *, width: int = 1100, height: int = 760
                      ) -> BrowserContext:
    context = await browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(20_000)
    return context


async def log_in(context: BrowserContext, base_url: str, key: str, path: str = "/") -> Page:
    """Open the console, log in with `key` through the form, then go to `path`."""
    page = await context.new_page()
    await page.goto(base_url + "/")
    await page.fill("input[name=key]", key)
    await page.click("button[type=submit]")
    await page.wait_for_selector("[data-testid=connection]:has-text('live')")
    if path != "/":
        await page.goto(base_url + "/ui" + path)
        await page.wait_for_selector("[data-testid=connection]:has-text('live')")
    return page


async def shot(page: Page, name: str) -> Path:
    path = SHOTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path
