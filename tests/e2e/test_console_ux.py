"""The console as a new user meets it (issue 17), in a real browser against `ator serve`.

Replies are markdown rendered safely (raw HTML, `javascript:` links and images do nothing);
a subagent's spawn and result are cards with its title, status, cost and a link to its chat;
the thread list hides subagent threads until asked and names each one's parent; the setup
form offers the catalog's providers and models with prices and windows and says what each
field does; a clear key in a setup points to the Secrets screen, once; the header is fully
reachable at 420 px; the API key form clears; a chat opens on its latest page, pages back on
scroll, and the tab keeps a bounded buffer of frames with no token deltas. Screenshots of
every screen at desktop width and at 420 px go to `SHOTS`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, Page

from ator.testing import AnthropicWireFake, OpenAIWireFake, Reply
from ator.testing.wire import ToolCall
from tests.e2e.browser import SHOTS, browser, log_in, new_context, shot
from tests.e2e.client import Client
from tests.e2e.conftest import Deployment, DeploymentFactory
from tests.e2e.replica import Replica

pytestmark = pytest.mark.e2e
__all__ = ["browser"]  # the session's browser fixture, used by the tests below

NARROW = 420


def money(usd: str) -> str:
    """As the console writes USD (api.ts `money`)."""
    v = float(usd)
    return f"${v:.6f}" if v < 0.01 else f"${v:.4f}"


@pytest.fixture(scope="module")
async def served(deployments: DeploymentFactory) -> tuple[Deployment, Replica, Client]:
    deployment = deployments()
    replica = deployment.start("ux")
    return deployment, replica, deployment.client(replica)


def _script(*steps: dict[str, Any], max_steps: int = 20) -> dict[str, Any]:
    return {"name": f"scripted-{uuid.uuid4().hex[:4]}", "provider": "scripted",
            "model": "scripted",
            "config": {"script": list(steps), "caps": {"max_steps": max_steps}}}


async def _both(page: Page, name: str, *, full: bool = True) -> None:
    """Screenshots at desktop width and at NARROW (the whole page, or what the window shows
    when `full` is False); nothing may be wider than the window."""
    async def take(suffix: str) -> None:
        if full:
            await shot(page, f"{name}-{suffix}")
        else:
            await page.screenshot(path=str(SHOTS / f"{name}-{suffix}.png"))

    await take("desktop")
    size = page.viewport_size or {"width": 1100, "height": 760}
    await page.set_viewport_size({"width": NARROW, "height": 800})
    await take("narrow")
    wide = await page.evaluate("document.documentElement.scrollWidth")
    assert wide <= NARROW, f"{name}: the page is {wide} px wide at {NARROW} px"
    await page.set_viewport_size(size)


async def _done(page: Page, n: int = 1) -> None:
    await page.locator("[data-testid=turn-footer][data-status=done]").nth(n - 1).wait_for()


REPLY = (
    "Here is **bold** and `inline_code()`.\n\n"
    "- one\n- two\n\n"
    "```python\nx = '" + "y" * 300 + "'\n```\n\n"
    "Payloads: <img src=x onerror=\"window.__xss='img'\"> "
    "<script>window.__xss='script'</script>\n\n"
    "[click me](javascript:window.__xss='link') and ![pixel](http://127.0.0.1:9/pixel.png)"
)


async def test_replies_render_markdown_and_payloads_stay_text(
    browser: Browser, served: tuple[Deployment, Replica, Client],
) -> None:
    deployment, replica, client = served
    setup = await client.create_setup(_script({"text": REPLY}))
    thread = await client.create_thread(
        setup["id"], title="<img src=x onerror=\"window.__xss='title'\">")
    context = await new_context(browser)
    try:
        page = await log_in(context, replica.url, deployment.admin_key, f"/threads/{thread['id']}")
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        await page.wait_for_selector("text=No messages yet")
        await page.fill("textarea[name=message]", "<b>not bold</b> **user text stays as typed**")
        await page.click("form.composer button[type=submit]")
        await _done(page)
        reply = page.locator("[data-testid=assistant-message]").last
        assert await reply.locator("strong").inner_text() == "bold"
        assert await reply.locator("li").count() == 2
        inline = reply.locator("p code").first
        assert await inline.inner_text() == "inline_code()"
        block = reply.locator("pre code")
        assert ("y" * 300) in await block.inner_text()
        for code in (inline, block):
            font = await code.evaluate("e => getComputedStyle(e).fontFamily")
            assert "monospace" in font, font
        # the long line wraps inside the bubble: nothing scrolls sideways
        pre = reply.locator("pre")
        assert await pre.evaluate("e => e.scrollWidth <= e.clientWidth + 1")
        # the payloads are text, and nothing of them ran or was fetched
        said = await reply.inner_text()
        assert "<img src=x onerror=" in said and "<script>window.__xss='script'</script>" in said
        assert await reply.locator("img, script").count() == 0
        assert await reply.locator("a[href^='javascript']").count() == 0
        assert "[click me](javascript:" in said  # not made a link
        await reply.get_by_text("click me").first.click()
        image = reply.locator("a", has_text="[image: pixel]")
        assert await image.get_attribute("href") == "http://127.0.0.1:9/pixel.png"
        assert await image.get_attribute("rel") == "noopener noreferrer nofollow"
        assert not [u for u in requests if "pixel.png" in u]
        user = page.locator("[data-testid=user-message]").last
        assert await user.inner_text() == "<b>not bold</b> **user text stays as typed**"
        assert "onerror" in await page.locator("h2").inner_text()
        assert await page.evaluate("window.__xss") is None
        await _both(page, "ux-01-markdown")
    finally:
        await context.close()


Family = tuple[Deployment, Replica, dict[str, Any], dict[str, Any]]


@pytest.fixture(scope="module")
async def family(deployments: DeploymentFactory) -> AsyncIterator[Family]:
    """A lead thread that spawned one subagent and heard back: (deployment, replica, the
    lead's thread, the child's tree node)."""
    async with (
        AnthropicWireFake([]) as lead_model,
        OpenAIWireFake([Reply(text="Found **three** things.")]) as worker_model,
    ):
        deployment = deployments(
            ATOR_ANTHROPIC_API_KEY="sk-test", ATOR_OPENAI_API_KEY="sk-test",
            ATOR_ANTHROPIC_BASE_URL=lead_model.base_url,
            ATOR_OPENAI_BASE_URL=worker_model.base_url, ATOR_EGRESS_ALLOW="127.0.0.1")
        replica = deployment.start("subagents")
        client = deployment.client(replica)
        lead = await client.create_setup({"name": "lead", "provider": "anthropic",
                                          "model": "claude-haiku-4-5"})
        worker = await client.create_setup({"name": "worker", "provider": "openai",
                                            "model": "gpt-4o-mini"})
        lead_model.push(
            Reply(tool_calls=[ToolCall("agent_spawn", {
                "title": "Research part A", "task": "find things", "setup_id": worker["id"]})]),
            Reply(text="Delegated; the result comes by itself."),
            Reply(text="Part A is in."),
        )
        thread = await client.create_thread(lead["id"], title="The lead")
        await client.post_message(thread["id"], "research it")
        # The child answers at once, so its result may reach the lead between the steps of
        # its first turn (the child ended before the lead's second model call: a loaded
        # machine) or wake a turn of its own (the third reply): either way it is one
        # notification event, and the lead's turn that took it ends.
        heard = await client.follow(thread["id"], lambda e: e["kind"] == "notification")
        await client.follow(thread["id"], after_seq=heard[-1]["seq"])
        tree = (await client.ok("GET", f"/v1/threads/{thread['id']}/tree"))["data"]
        yield deployment, replica, thread, tree["children"][0]


async def test_a_subagent_spawn_and_result_are_cards_with_a_link_to_its_chat(
    browser: Browser, family: Family,
) -> None:
    deployment, replica, thread, child = family
    context = await new_context(browser)
    try:
        page = await log_in(context, replica.url, deployment.admin_key, f"/threads/{thread['id']}")
        card = "[data-testid=subagent-card]"
        result = page.locator(f"{card}[data-kind=result]")
        await result.wait_for()
        spawn = page.locator(f"{card}[data-kind=spawn]")
        for shown in (spawn, result):
            assert await shown.get_attribute("data-child") == child["id"]
            assert await shown.get_attribute("data-status") == "done"
            words = await shown.inner_text()
            assert "Research part A" in words and "done" in words.lower()
            cost = await shown.locator("[data-testid=subagent-cost]").inner_text()
            assert cost == money(child["usd"]) and float(child["usd"]) > 0, (cost, child)
        assert await result.locator(".subagent-body strong").inner_text() == "three"
        text = await page.locator("[data-testid=messages]").inner_text()
        assert "<subagent_result" not in text and "</subagent_result>" not in text
        assert '"alias"' not in text and "do not poll" not in text  # the spawn's raw JSON
        await _both(page, "ux-02-subagent-cards")
        await result.locator("[data-testid=subagent-link]").click()
        await page.wait_for_url(f"**/ui/threads/{child['id']}")
        await page.wait_for_selector("[data-testid=assistant-message] strong:has-text('three')")
    finally:
        await context.close()


async def test_the_thread_list_hides_subagent_threads_until_asked_and_names_their_parent(
    browser: Browser, family: Family,
) -> None:
    deployment, replica, thread, child = family
    context = await new_context(browser)
    try:
        page = await log_in(context, replica.url, deployment.admin_key)
        lead_row = page.locator(f"[data-thread='{thread['id']}']")
        await lead_row.wait_for()
        child_row = page.locator(f"[data-thread='{child['id']}']")
        assert await child_row.count() == 0
        await _both(page, "ux-03-threads-children-hidden")
        await page.check("input[name=children]")
        await child_row.wait_for()
        parent = child_row.locator("[data-testid=parent]")
        assert await parent.get_attribute("data-parent") == thread["id"]
        assert "subagent of The lead" in await parent.inner_text()
        assert await lead_row.locator("[data-testid=parent]").count() == 0
        await _both(page, "ux-04-threads-children-shown")
        await child_row.locator("[data-testid=parent-link]").click()
        await page.wait_for_url(f"**/ui/threads/{thread['id']}")
    finally:
        await context.close()


async def test_the_setup_form_offers_the_catalog_and_sends_clear_keys_to_secrets(
    browser: Browser, served: tuple[Deployment, Replica, Client],
) -> None:
    deployment, replica, _ = served
    context = await new_context(browser)
    try:
        page = await log_in(context, replica.url, deployment.admin_key, "/setups")
        await page.click("text=New setup")
        editor = page.locator("[data-testid=setup-editor]")
        providers = editor.locator("select[name=provider] option")
        await providers.nth(3).wait_for(state="attached")
        labels = [await providers.nth(i).inner_text() for i in range(await providers.count())]
        assert labels[0] == "Anthropic" and any("OpenAI" in x for x in labels)
        assert any("Local" in x for x in labels) and any("Scripted" in x for x in labels)
        await editor.locator("select[name=provider]").select_option("anthropic")
        choice = editor.locator("select[name=model_choice]")
        haiku = choice.locator("option[value='claude-haiku-4-5']")
        assert "$1 / $5 per MTok" in await haiku.inner_text()
        await choice.select_option("claude-haiku-4-5")
        assert await editor.locator("input[name=model]").input_value() == "claude-haiku-4-5"
        facts = await editor.locator("[data-testid=model-facts]").inner_text()
        assert "$1 in / $5 out per million tokens" in facts and "200k tokens" in facts, facts
        hint = await editor.locator("[data-testid=base-url-hint]").inner_text()
        assert "Leave empty to use this server's Anthropic endpoint" in hint, hint
        # every field says what it does
        for field in ("name", "provider", "model", "base_url", "api_key", "persona", "config",
                      "tool_policy"):
            label = editor.locator(f"label:has([name={field}])")
            assert await label.locator(".hint").count() >= 1, field
        # a model the catalog does not know is allowed, and said to be unpriced
        await editor.locator("input[name=model]").fill("my-own-model")
        assert await choice.input_value() == ""
        assert "unpriced" in await editor.locator("[data-testid=model-facts]").inner_text()
        await choice.select_option("claude-haiku-4-5")
        await _both(page, "ux-05-setup-form")

        # A clear key typed in its field is refused in the console's words.
        await editor.locator("input[name=name]").fill("with a clear key")
        await editor.locator("input[name=api_key]").fill("sk-ant-not-a-reference-0123456789")
        await editor.locator("button[type=submit]").click()
        said = await editor.locator("[role=alert]").inner_text()
        assert "Secrets screen" in said and "/v1/" not in said, said
    finally:
        await context.close()


async def test_a_clear_key_in_a_setup_is_refused_once_and_points_to_the_secrets_screen(
    browser: Browser, served: tuple[Deployment, Replica, Client],
) -> None:
    deployment, replica, _ = served
    context = await new_context(browser)
    try:
        page = await log_in(context, replica.url, deployment.admin_key, "/setups")
        await page.click("text=New setup")
        editor = page.locator("[data-testid=setup-editor]")
        await editor.locator("input[name=name]").fill("with a clear key")
        await editor.locator("input[name=model]").fill("claude-haiku-4-5")  # on anthropic
        await editor.locator("textarea[name=config]").fill(
            '{"api_key": "sk-ant-not-a-reference-0123456789"}')
        await editor.locator("button[type=submit]").click()
        alert = editor.locator("[role=alert]")
        said = await alert.inner_text()
        assert "Secrets screen" in said and "secret:NAME" in said, said
        assert "PUT /v1/secrets" not in said and "/v1/" not in said, said
        assert said.count("credential") == 1, said  # said once
        assert "sk-ant-not-a-reference" not in said
        await _both(page, "ux-06-clear-key-refused")
        await alert.locator("[data-testid=to-secrets]").click()
        await page.wait_for_url("**/ui/secrets")
        await page.wait_for_selector("h2:has-text('Secrets')")
    finally:
        await context.close()


async def test_at_420_px_every_header_link_is_on_screen_and_works(
    browser: Browser, served: tuple[Deployment, Replica, Client],
) -> None:
    deployment, replica, _ = served
    context = await new_context(browser, width=NARROW, height=800)
    try:
        page = await log_in(context, replica.url, deployment.admin_key)
        links = page.locator("header nav a")
        assert await links.count() == 11  # every screen of an admin
        for i in range(await links.count()):
            link = links.nth(i)
            seen = await link.evaluate("""a => {
                const r = a.getBoundingClientRect();
                const hit = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
                return {left: r.left, right: r.right, top: r.top, bottom: r.bottom,
                        hit: a === hit || a.contains(hit)};
            }""")
            name = await link.inner_text()
            assert seen["left"] >= 0 and seen["right"] <= NARROW, (name, seen)
            assert seen["hit"], f"{name} is covered or clipped: {seen}"
        await shot(page, "ux-07-header-narrow")
        await page.click("header nav >> text=API keys")
        await page.wait_for_url("**/ui/keys")
        await page.wait_for_selector("h2:has-text('API keys')")
        await page.click("header nav >> text=Policy")
        await page.wait_for_url("**/ui/policy")
        await page.wait_for_selector("[data-testid=policy]")
        await shot(page, "ux-08-policy-narrow")
    finally:
        await context.close()


async def test_the_key_form_clears_every_field_after_a_key_is_made(
    browser: Browser, served: tuple[Deployment, Replica, Client],
) -> None:
    deployment, replica, _ = served
    context = await new_context(browser)
    try:
        page = await log_in(context, replica.url, deployment.admin_key, "/keys")
        name, email = "input[placeholder='key name']", "input[type=email]"
        role = "form.card select"
        await page.fill(name, "ci bot")
        await page.fill(email, "bot@example.com")
        await page.select_option(role, "admin")
        await page.click("text=Create key")
        await page.wait_for_selector("[data-testid=new-key]")
        assert await page.input_value(name) == ""
        assert await page.input_value(email) == ""
        assert await page.input_value(role) == "member"
        await page.wait_for_selector("[data-testid=keys] >> text=ci bot")
        await _both(page, "ux-09-key-made")
    finally:
        await context.close()


def _long_turn(steps: int) -> dict[str, Any]:
    script = [{"text": f"Step {i} of the long turn.",
               "tool_calls": [{"name": "calculator", "input": {"expression": f"{i} + 1"}}]}
              for i in range(steps)]
    return _script(*script, {"text": "All done."}, max_steps=steps + 5)


async def test_a_long_chat_opens_on_its_latest_page_and_pages_back_on_scroll(
    browser: Browser, served: tuple[Deployment, Replica, Client],
) -> None:
    deployment, replica, client = served
    setup = await client.create_setup(_long_turn(60))
    thread = await client.create_thread(setup["id"], title="Long")
    await client.post_message(thread["id"], "go")
    await client.follow(thread["id"])
    last = (await client.thread(thread["id"]))["last_seq"]
    assert last > 120
    context = await new_context(browser)
    try:
        page = await log_in(context, replica.url, deployment.admin_key, f"/threads/{thread['id']}")
        reads: list[str] = []
        joins: list[str] = []
        page.on("request", lambda r: reads.append(r.url) if "/events" in r.url else None)
        page.on("websocket", lambda ws: ws.on(
            "framesent", lambda p: joins.append(str(p)) if '"join"' in str(p) else None))
        await page.reload()  # opened again, with what it reads and sends watched
        messages = page.locator("[data-testid=messages]")
        await page.wait_for_selector("[data-testid=assistant-message] >> text=All done.")
        first_seen = await page.locator("[data-testid=messages] [data-seq]").count()
        assert "Step 0 of" not in await messages.inner_text()  # not the whole thread
        # the socket joined after what the page showed: no replay from seq 0
        after = [int(m) for j in joins if thread["id"] in j
                 for m in re.findall(r'"after_seq":(\d+)', j)]
        assert after == [last], joins
        # it opens at the end: the last footer is on screen, above the composer
        footer = await page.locator("[data-testid=turn-footer]").last.bounding_box()
        composer = await page.locator("form.composer").bounding_box()
        assert footer and composer and 0 < footer["y"] + footer["height"] <= composer["y"]
        await shot(page, "ux-10-long-chat-latest")

        # Scrolling up reads the page before, and keeps what the reader looked at in place.
        for _ in range(10):
            if not await page.locator("[data-testid=load-older]").count():
                break
            top = page.locator("[data-testid=messages] [data-seq]").first
            seq = await top.get_attribute("data-seq")
            count = await page.locator("[data-testid=messages] [data-seq]").count()
            await page.evaluate("window.scrollTo(0, 0)")
            await page.wait_for_function(
                "n => document.querySelectorAll('[data-testid=messages] [data-seq]').length > n",
                arg=count)
            box = await page.locator(f"[data-testid=messages] [data-seq='{seq}']").bounding_box()
            assert box is not None and 0 <= box["y"] < 760, box  # still on screen
        assert not await page.locator("[data-testid=load-older]").count()
        shown = await messages.inner_text()
        assert "Step 0 of" in shown and "go" in await page.locator(
            "[data-testid=user-message]").first.inner_text()
        seqs = [int(s) for s in await page.locator("[data-testid=messages] [data-seq]")
                .evaluate_all("es => es.map(e => e.dataset.seq)")]
        assert seqs == sorted(set(seqs)) and len(seqs) > first_seen
        assert reads and all("before=" in u and "limit=60" in u for u in reads), reads
        assert len(reads) >= 3
        await page.evaluate("window.scrollTo(0, 0)")
        await _both(page, "ux-11-long-chat-scrolled-back", full=False)
    finally:
        await context.close()


async def test_the_tab_keeps_a_bounded_buffer_of_frames_without_deltas(
    browser: Browser, served: tuple[Deployment, Replica, Client],
) -> None:
    deployment, replica, client = served
    setup = await client.create_setup(_long_turn(120))
    thread = await client.create_thread(setup["id"], title="Many frames")
    context = await new_context(browser)
    try:
        page = await log_in(context, replica.url, deployment.admin_key, f"/threads/{thread['id']}")
        await page.wait_for_selector("text=No messages yet")
        await client.post_message(thread["id"], "go")
        await page.wait_for_selector("[data-testid=turn-footer][data-status=done]",
                                     timeout=120_000)
        events = await client.events(thread["id"])
        assert len(events) > 240
        kept: list[dict[str, Any]] = await page.evaluate("window.__atorFrames")
        assert 0 < len(kept) <= 200, len(kept)
        assert not [f for f in kept if f["type"] == "delta"]
        persisted = [f["seq"] for f in kept if f["seq"] is not None]
        assert persisted[-1] == events[-1]["seq"]  # the newest are the ones kept
        assert await page.evaluate("window.__atorDeltas") > 0  # deltas came, and were shown
        # the chat itself shows the whole turn, live
        assert await page.locator("[data-testid=assistant-message]").count() == 121
    finally:
        await context.close()
