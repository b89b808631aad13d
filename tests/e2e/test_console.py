"""The web console in a real browser against real `ator serve` processes (issue 11).

Chromium (playwright) logs in with an API key, creates a thread and chats with a model that
streams over seconds (`ator.testing.paced`, an OpenAI-compatible wire fake): the reply must
show in increments, a stop must end the turn as stopped, a second browser must see the same
frames live, a replica restarted mid-turn must cost the page nothing (missed frames replayed,
none twice), a message sent through one replica's socket must stream to a browser on another
(Redis), and an idle page must make no HTTP request at all. The inspector of a turn shows
its calls' layer hashes and names an org-policy edit made in the console as what broke the
cache; the subagent tree shows children appearing and finishing live, without polling.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, Page

from ator.testing import AnthropicWireFake, OpenAIWireFake, Reply
from ator.testing.paced import PacedModel
from ator.testing.wire import Keepalives, ToolCall
from tests.e2e.browser import browser, log_in, new_context, shot
from tests.e2e.client import Client, script_setup
from tests.e2e.conftest import Deployment, DeploymentFactory
from tests.e2e.replica import Replica

pytestmark = pytest.mark.e2e
__all__ = ["browser"]  # the session's browser fixture, used by the tests below

TEXT = "One two three four five six seven eight nine ten eleven twelve. " * 3


@pytest.fixture(scope="module")
async def model() -> AsyncIterator[PacedModel]:
    """A model that streams TEXT in 40 pieces over 5 seconds, to every request."""
    async with PacedModel(duration=5.0, chunks=40, text=TEXT) as paced:
        yield paced


def _env(model: PacedModel) -> dict[str, Any]:
    return {"ATOR_OPENAI_API_KEY": "sk-paced", "ATOR_OPENAI_BASE_URL": model.base_url,
            "ATOR_EGRESS_ALLOW": "127.0.0.1"}


async def _setup(client: Client) -> dict[str, Any]:
    return await client.ok("POST", "/v1/setups", 201, json={
        "name": f"paced-{uuid.uuid4().hex[:4]}", "provider": "openai", "model": "gpt-4o-mini",
        "persona": "You count."})


@pytest.fixture(scope="module")
async def single(deployments: DeploymentFactory, model: PacedModel
                 ) -> tuple[Deployment, Replica, dict[str, Any]]:
    deployment = deployments(**_env(model))
    replica = deployment.start("web")
    return deployment, replica, await _setup(deployment.client(replica))


async def _frames(page: Page, thread_id: str) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = await page.evaluate(
        "id => window.__atorFrames.filter(f => f.data && f.data.thread_id === id)", thread_id)
    return frames


def _persisted(frames: list[dict[str, Any]]) -> list[int]:
    return [f["seq"] for f in frames if f["seq"] is not None]


async def _deltas(page: Page) -> int:
    """Delta batches the page received (it counts them; the frames it keeps have none)."""
    count: int = await page.evaluate("window.__atorDeltas")
    return count


async def _send(page: Page, text: str) -> None:
    await page.fill("textarea[name=message]", text)
    await page.click("form.composer button[type=submit]")


async def _partial(page: Page) -> str:
    """The streamed reply as first seen on screen, while it is still streaming."""
    await page.wait_for_function(
        "() => { const e = document.querySelector('[data-testid=streaming]');"
        " return e && e.textContent.trim().length > 0 }")
    return (await page.locator("[data-testid=streaming]").first.inner_text()).strip()


async def _following(page: Page, thread_id: str) -> None:
    """Until the chat follows the thread over its socket. It reads the thread over HTTP
    first and follows from the last seq that read showed, so what a test posts before this
    may reach the page as history, not as frames (CI once saw frames [3, 4] of 1-4)."""
    await page.wait_for_function(
        "id => window.__atorLive.follows.has('thread:' + id)", arg=thread_id)


async def _create_thread(page: Page, title: str) -> str:
    await page.wait_for_selector("[data-testid=new-thread] select option", state="attached")
    await page.fill("[data-testid=new-thread] input[name=title]", title)
    await page.click("[data-testid=new-thread] button[type=submit]")
    await page.wait_for_selector("textarea[name=message]")
    return page.url.rstrip("/").rsplit("/", 1)[-1]


async def test_log_in_chat_and_a_second_browser_sees_the_same_frames(
    browser: Browser, single: tuple[Deployment, Replica, dict[str, Any]],
) -> None:
    deployment, replica, _ = single
    first = await new_context(browser)
    second = await new_context(browser)
    try:
        page = await first.new_page()
        await page.goto(replica.url + "/")
        assert page.url.endswith("/ui/")
        await page.fill("input[name=key]", "ator_00000000_not-a-key")
        await page.click("button[type=submit]")
        error = await page.wait_for_selector("[role=alert]")
        said = await error.inner_text()
        assert "not valid" in said and "session ended" not in said, said
        await shot(page, "01-login-error")
        await page.fill("input[name=key]", deployment.admin_key)
        await page.click("button[type=submit]")
        await page.wait_for_selector("[data-testid=connection]:has-text('live')")
        # the key went into a cookie the page cannot read, and nowhere else
        assert await page.evaluate("document.cookie") == ""
        assert await page.evaluate("JSON.stringify(localStorage)") == "{}"
        cookie = next(c for c in await first.cookies() if c["name"] == "ator_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"

        thread_id = await _create_thread(page, "Counting")
        other = await log_in(second, replica.url, deployment.admin_key, f"/threads/{thread_id}")
        await other.wait_for_selector("text=No messages yet")

        await _send(page, "Count for me")
        partial = await _partial(page)
        other_partial = await _partial(other)
        await shot(page, "02-chat-streaming")
        for seen in (partial, other_partial):  # part of the reply, before the rest
            assert 0 < len(seen) < len(TEXT.strip()) and TEXT.startswith(seen), seen
        for p in (page, other):
            await p.wait_for_selector("[data-testid=turn-footer][data-status=done]")
            reply = await p.locator("[data-testid=assistant-message]").last.inner_text()
            assert reply.strip() == TEXT.strip()
        await shot(page, "03-chat-done")
        footer = await page.locator("[data-testid=turn-footer]").last.inner_text()
        assert "end_turn" in footer and "1 step" in footer and "cache 0 read / 0 write" in footer

        mine, theirs = await _frames(page, thread_id), await _frames(other, thread_id)
        assert await _deltas(page) >= 3 and await _deltas(other) >= 3  # several increments
        assert _persisted(mine) == _persisted(theirs) == list(range(1, len(_persisted(mine)) + 1))

        await page.click("text=Turns")
        await page.wait_for_selector("[data-testid=turns] tbody tr >> text=done")
        await shot(page, "04-turns")
        await page.click("text=Threads")
        await page.wait_for_selector("[data-thread] >> text=Counting")
        await shot(page, "05-threads")
    finally:
        await first.close()
        await second.close()


async def test_stop_a_slow_turn(
    browser: Browser, single: tuple[Deployment, Replica, dict[str, Any]],
) -> None:
    deployment, replica, _ = single
    context = await new_context(browser)
    try:
        page = await log_in(context, replica.url, deployment.admin_key)
        thread_id = await _create_thread(page, "To be stopped")
        await _send(page, "Count slowly")
        await _partial(page)
        # A list opened while the turn runs shows it busy from the start, then idle (pushed).
        listing = await context.new_page()
        await listing.goto(replica.url + "/ui/")
        busy = f"[data-thread='{thread_id}'] [data-testid=busy]"
        await listing.wait_for_selector(f"{busy}[data-busy='1']")
        await page.click("[data-testid=stop]")
        await listing.wait_for_selector(f"{busy}[data-busy='0']")
        footer = await page.wait_for_selector("[data-testid=turn-footer]")
        assert await footer.get_attribute("data-status") == "stopped"
        assert "cancelled:user" in await footer.inner_text()
        # the partial reply is kept, and is not the whole reply
        kept = (await page.locator("[data-testid=assistant-message]").last.inner_text()).strip()
        assert 0 < len(kept) < len(TEXT.strip()) and TEXT.startswith(kept)
        await page.wait_for_selector("[data-testid=thread-state][data-busy='0']")
        await shot(page, "06-stopped")
    finally:
        await context.close()


async def test_an_idle_page_makes_no_http_requests_and_still_updates_live(
    browser: Browser, single: tuple[Deployment, Replica, dict[str, Any]],
) -> None:
    deployment, replica, setup = single
    client = deployment.client(replica)
    thread = await client.ok("POST", "/v1/threads", 201,
                             json={"setup_id": setup["id"], "title": "Busy elsewhere"})
    context = await new_context(browser, width=390, height=800)  # a phone-sized window
    try:
        page = await log_in(context, replica.url, deployment.admin_key)
        row = f"[data-thread='{thread['id']}']"
        await page.wait_for_selector(row)
        requests: list[str] = []
        page.on("request", lambda r: requests.append(f"{r.method} {r.url}"))
        # Someone else starts a turn: the list shows it busy, then idle, over the socket.
        await client.ok("POST", f"/v1/threads/{thread['id']}/messages", 202,
                        json={"text": "hello"})
        await page.wait_for_selector(f"{row} [data-testid=busy][data-busy='1']")
        await shot(page, "07-threads-narrow-busy")
        await page.wait_for_selector(f"{row} [data-testid=busy][data-busy='0']")
        await asyncio.sleep(30)  # the measurement itself: 30 s of an idle page
        assert requests == []
        assert await page.locator("[data-testid=connection]").inner_text() == "● live"
    finally:
        await context.close()


@pytest.fixture(scope="module")
async def pair(deployments: DeploymentFactory, model: PacedModel, databases: Any
               ) -> tuple[Deployment, Replica, Replica, dict[str, Any]]:
    deployment = deployments(redis=True, database_url=await databases(), **_env(model))
    a, b = deployment.start("a"), deployment.start("b")
    return deployment, a, b, await _setup(deployment.client(a))


async def test_a_message_sent_on_replica_a_streams_to_a_browser_on_replica_b(
    browser: Browser, pair: tuple[Deployment, Replica, Replica, dict[str, Any]],
) -> None:
    deployment, a, b, _ = pair
    on_a, on_b = await new_context(browser), await new_context(browser)
    try:
        sender = await log_in(on_a, a.url, deployment.admin_key)
        thread_id = await _create_thread(sender, "Across replicas")
        watcher = await log_in(on_b, b.url, deployment.admin_key, f"/threads/{thread_id}")
        await watcher.wait_for_selector("text=No messages yet")
        await _send(sender, "Count across")  # through replica A's socket
        partial = await _partial(watcher)
        assert 0 < len(partial) < len(TEXT.strip())
        await watcher.wait_for_selector("[data-testid=turn-footer][data-status=done]")
        assert await _deltas(watcher) >= 3
        await shot(watcher, "08-replica-b")
    finally:
        await on_a.close()
        await on_b.close()


async def test_a_replica_restarted_mid_turn_costs_the_page_nothing(
    browser: Browser, pair: tuple[Deployment, Replica, Replica, dict[str, Any]],
) -> None:
    deployment, a, b, _ = pair
    context = await new_context(browser)
    try:
        page = await log_in(context, b.url, deployment.admin_key)
        thread_id = await _create_thread(page, "Through a restart")
        await _following(page, thread_id)  # every frame of the turn comes over the socket
        client = deployment.client(a)
        await client.ok("POST", f"/v1/threads/{thread_id}/messages", 202,
                        json={"text": "Count through a restart"})
        await _partial(page)
        before = _persisted(await _frames(page, thread_id))
        socket_id = await page.evaluate("window.__atorLive.socket.id")
        b = await asyncio.to_thread(deployment.restart, b)  # the page's replica goes away
        await page.wait_for_selector("[data-testid=turn-footer]")  # replayed on reconnect
        await page.wait_for_selector("[data-testid=connection]:has-text('live')")
        assert await page.evaluate("window.__atorLive.socket.id") != socket_id  # a new socket
        events = await client.ok("GET", f"/v1/threads/{thread_id}/events")
        seqs = _persisted(await _frames(page, thread_id))
        assert seqs == [e["seq"] for e in events["data"]]  # every one, in order, none twice
        assert len(seqs) > len(before)  # some of them came after the restart
        assert (await page.locator("[data-testid=assistant-message]").last.inner_text()
                ).strip() == TEXT.strip()
        await shot(page, "09-after-restart")
    finally:
        await context.close()


async def test_setups_secrets_keys_and_usage_screens(
    browser: Browser, single: tuple[Deployment, Replica, dict[str, Any]],
) -> None:
    deployment, replica, setup = single
    client = deployment.client(replica)
    spent = await client.create_thread(setup["id"], title="Spent")
    await client.post_message(spent["id"], "spend")
    await client.follow(spent["id"])
    admin_ctx, viewer_ctx = await new_context(browser), await new_context(browser, width=420)
    try:
        page = await log_in(admin_ctx, replica.url, deployment.admin_key, "/setups")
        await page.click("text=New setup")
        editor = page.locator("[data-testid=setup-editor]")
        await editor.locator("input[name=name]").fill("helper")
        await editor.locator("select[name=provider]").select_option("scripted")
        await editor.locator("input[name=model]").fill("scripted")
        await editor.locator("textarea[name=persona]").fill("You help.")
        await editor.locator("textarea[name=config]").fill('{"script": [{"text": "hi"}')
        await editor.locator("button[type=submit]").click()
        assert "not valid JSON" in await editor.locator("[role=alert]").inner_text()
        await editor.locator("textarea[name=config]").fill(
            '{"script": [{"text": "hi"}], "caps": {"max_steps": 5}}')
        await editor.locator("textarea[name=tool_policy]").fill('{"allow": null, "deny": ["x"]}')
        await editor.locator("button[type=submit]").click()
        card = page.locator("[data-testid=setup]", has_text="helper")
        await card.wait_for()
        assert '"max_steps":5' in await card.inner_text()
        await card.locator("text=Edit").click()
        await editor.locator("textarea[name=persona]").fill("You help a lot.")
        await editor.locator("button[type=submit]").click()
        await page.locator("[data-testid=setup]", has_text="You help a lot.").wait_for()
        assert "v2" in await card.inner_text()
        await shot(page, "10-setups")

        await page.click("header >> text=Secrets")
        await page.fill("input[placeholder=NAME]", "search_token")
        await page.fill("input[type=password]", "sk-very-secret-value")
        await page.click("text=Save secret")
        await page.wait_for_selector("[data-testid=secrets] >> text=search_token")
        assert "sk-very-secret-value" not in await page.content()
        await shot(page, "11-secrets")

        await page.click("header >> text=API keys")
        await page.fill("input[placeholder='key name']", "reader")
        await page.fill("input[type=email]", "reader@example.com")
        await page.select_option("form select", "viewer")
        await page.click("text=Create key")
        viewer_key = (await page.locator("[data-testid=new-key]").inner_text()).strip()
        assert viewer_key.startswith("ator_")
        await shot(page, "12-keys")

        await page.click("header >> text=Usage")
        await page.wait_for_selector("[data-testid=usage-chart] rect")
        await page.select_option("select", "thread")
        await page.wait_for_selector("[data-testid=usage] >> text=Spent")
        await shot(page, "13-usage")

        viewer = await log_in(viewer_ctx, replica.url, viewer_key, "/setups")
        await viewer.wait_for_selector("text=Only admins can create or edit setups")
        assert await viewer.locator("header >> text=Secrets").count() == 0
        await viewer.goto(replica.url + f"/ui/threads/{spent['id']}")
        await viewer.wait_for_selector("[data-testid=turn-footer]")
        assert await viewer.locator("textarea[name=message]").count() == 0  # viewers read
        await shot(viewer, "14-viewer-narrow")

        # Revoking the key ends the viewer's session: the next request says what to do.
        row = page.locator("[data-testid=keys] tr", has_text="reader")
        page.once("dialog", lambda d: d.accept())
        await page.click("header >> text=API keys")
        await row.locator("text=Revoke").click()
        await row.locator("text=revoked").wait_for()
        await viewer.click("header >> text=Usage")
        error = await viewer.wait_for_selector("form.login [role=alert]")  # back to the login
        assert "Log in again" in await error.inner_text()
        await shot(viewer, "15-session-ended")
    finally:
        await admin_ctx.close()
        await viewer_ctx.close()


async def test_tool_calls_and_results_show_as_they_happen(
    browser: Browser, single: tuple[Deployment, Replica, dict[str, Any]],
) -> None:
    deployment, replica, _ = single
    client = deployment.client(replica)
    setup = await client.ok("POST", "/v1/setups", 201, json={
        "name": "calc", "provider": "scripted", "model": "scripted", "config": {"script": [
            {"tool_calls": [{"name": "calculator", "input": {"expression": "6 * 7"}}]},
            {"text": "The calculator says 42.", "delay": 3.0}]}})
    thread = await client.create_thread(setup["id"], title="Tools")
    context = await new_context(browser)
    try:
        page = await log_in(context, replica.url, deployment.admin_key, f"/threads/{thread['id']}")
        await page.wait_for_selector("text=No messages yet")
        await _send(page, "What is 6 * 7?")
        call = await page.wait_for_selector("[data-testid=tool-call]")
        assert "calculator" in await call.inner_text() and "6 * 7" in await call.inner_text()
        result = await page.wait_for_selector("[data-testid=tool-result]")
        assert "42" in await result.inner_text()
        # shown while the turn still runs (the model's answer is 3 s away)
        assert await page.locator("[data-testid=thread-state]").get_attribute("data-busy") == "1"
        await shot(page, "16-tool-running")
        footer = await page.wait_for_selector("[data-testid=turn-footer][data-status=done]")
        assert "2 steps" in await footer.inner_text()
        assert "The calculator says 42." in await page.locator(
            "[data-testid=assistant-message]").last.inner_text()
    finally:
        await context.close()


async def _layers(page: Page) -> dict[str, str]:
    """The open inspector's last call: layer name -> hash."""
    call = page.locator("[data-testid=inspector] [data-testid=model-call]").last
    await call.locator("[data-testid=layer]").first.wait_for()
    rows = call.locator("[data-testid=layer]")
    return {await rows.nth(i).get_attribute("data-name") or "":
            await rows.nth(i).get_attribute("data-hash") or "" for i in range(await rows.count())}


async def test_the_inspector_names_a_policy_edit_made_in_the_console_as_the_cache_break(
    browser: Browser, single: tuple[Deployment, Replica, dict[str, Any]],
) -> None:
    deployment, replica, _ = single
    client = deployment.client(replica)
    setup = await client.ok("POST", "/v1/setups", 201, json=script_setup({"text": "Noted."}))
    thread = await client.create_thread(setup["id"], title="Inspected")
    member = await client.ok("POST", "/v1/api-keys", 201, json={
        "name": "member", "role": "member", "email": "member@example.com"})
    admin_ctx, member_ctx = await new_context(browser), await new_context(browser, width=420)
    try:
        page = await log_in(admin_ctx, replica.url, deployment.admin_key,
                            f"/threads/{thread['id']}")
        await page.wait_for_selector("text=No messages yet")
        await _send(page, "first")
        footer = page.locator("[data-testid=turn-footer][data-status=done]")
        await footer.first.wait_for()
        await footer.first.locator("[data-testid=inspect]").click()
        before = await _layers(page)
        assert "core" in before and "org_policy" not in before
        assert all(len(h) == 16 for h in before.values())  # the API's hashes, shown short
        diff = page.locator("[data-testid=inspector] [data-testid=cache-diff]").last
        assert "first call" in await diff.inner_text()
        await shot(page, "17-inspector-first")
        await page.click("[data-testid=close-inspector]")

        # An admin edits the org policy in the console; then someone else edits it too and
        # the console's next save (made on a stale copy) is refused and explained.
        await page.click("header >> text=Policy")
        form = page.locator("[data-testid=policy]")
        await form.locator("textarea[name=text]").fill("Answer in French.")
        await form.locator("button[type=submit]").click()
        await page.wait_for_selector("[data-testid=policy][data-version='1'] [data-testid=saved]")
        await client.ok("PUT", "/v1/org/policy", json={"text": "Answer in French, briefly."})
        await form.locator("textarea[name=text]").fill("Answer in German.")
        await form.locator("button[type=submit]").click()
        said = await form.locator("[role=alert]").inner_text()
        assert "Someone else changed this" in said and "version 1" in said, said
        await shot(page, "18-policy-stale")
        await page.click("[data-testid=reload-layer]")
        await page.wait_for_selector("[data-testid=policy][data-version='2']")
        assert await form.locator("textarea[name=text]").input_value() == \
            "Answer in French, briefly."

        await page.goto(replica.url + f"/ui/threads/{thread['id']}")
        await footer.first.wait_for()
        await _send(page, "second")
        await footer.nth(1).wait_for()
        await footer.nth(1).locator("[data-testid=inspect]").click()
        after = await _layers(page)
        assert after["core"] == before["core"]  # what did not change keeps its hash
        assert "org_policy" in after
        diff = page.locator("[data-testid=inspector] [data-testid=cache-diff]").last
        assert (await diff.get_attribute("data-broken") or "").startswith("layer:org_policy")
        words = await diff.inner_text()
        assert "Cache broken by layer:org_policy" in words and "org policy changed" in words
        version = page.locator("[data-testid=inspector] [data-testid=layer]"
                               "[data-name=org_policy]").last
        assert "v2" in await version.inner_text()
        await shot(page, "19-inspector-policy-broke-cache")
        await page.click("[data-testid=close-inspector]")
        # the Turns tab opens the same inspector
        await page.click(".tabs >> text=Turns")
        await page.locator("[data-testid=turns] [data-testid=inspect]").first.click()
        await page.wait_for_selector("[data-testid=inspector] [data-testid=model-call]")
        await page.click("[data-testid=close-inspector]")

        # A member may edit the thread's instructions but not inspect someone else's calls.
        other = await log_in(member_ctx, replica.url, member["key"], f"/threads/{thread['id']}")
        await other.locator("[data-testid=inspect]").first.click()
        said = await other.locator("[data-testid=inspector] [role=alert]").inner_text()
        assert "Not yours to see" in said
        await shot(other, "20-inspector-not-yours")
        await other.click("[data-testid=close-inspector]")
        await other.click(".tabs >> text=Instructions")
        editor = other.locator("[data-testid=instructions]")
        await editor.locator("textarea[name=text]").fill("Be terse here.")
        await editor.locator("button[type=submit]").click()
        await other.wait_for_selector("[data-testid=instructions][data-version='1'] "
                                      "[data-testid=saved]")
        shown = await client.ok("GET", f"/v1/threads/{thread['id']}/instructions")
        assert shown["text"] == "Be terse here." and shown["version"] == 1
        await shot(other, "21-instructions-narrow")
    finally:
        await admin_ctx.close()
        await member_ctx.close()


async def test_the_subagent_tree_shows_children_appear_and_finish_live_without_polling(
    browser: Browser, deployments: DeploymentFactory,
) -> None:
    children = [Keepalives(reply=Reply(text=t), every=0.1, duration=2.5)
                for t in ("alpha findings", "beta findings")]
    async with (
        AnthropicWireFake([]) as parent_model,
        OpenAIWireFake(children) as child_model,
    ):
        deployment = deployments(
            ATOR_ANTHROPIC_API_KEY="sk-test", ATOR_OPENAI_API_KEY="sk-test",
            ATOR_ANTHROPIC_BASE_URL=parent_model.base_url,
            ATOR_OPENAI_BASE_URL=child_model.base_url, ATOR_EGRESS_ALLOW="127.0.0.1")
        replica = deployment.start("tree")
        client = deployment.client(replica)
        lead = await client.create_setup({"name": "lead", "provider": "anthropic",
                                          "model": "claude-haiku-4-5"})
        worker = await client.create_setup({"name": "worker", "provider": "openai",
                                            "model": "gpt-4o-mini"})
        parent_model.push(
            Reply(tool_calls=[ToolCall("agent_spawn", {"title": f"part {p}", "task": f"part {p}",
                                                       "setup_id": worker["id"]})
                              for p in ("A", "B")]),
            # the parent's turn outlasts the children's, so both results wait in its mailbox
            # and arrive together with its next turn
            Keepalives(reply=Reply(text="Delegated; waiting."), every=0.2, duration=3.5),
            Reply(text="Both are in."),
        )
        thread = await client.create_thread(lead["id"], title="Lead")
        context = await new_context(browser)
        try:
            page = await log_in(context, replica.url, deployment.admin_key,
                                f"/threads/{thread['id']}")
            await page.click(".tabs >> text=Tree")
            await page.wait_for_selector("[data-testid=tree][data-nodes='1']")
            requests: list[str] = []
            page.on("request", lambda r: requests.append(f"{r.method} {r.url}"))
            await client.post_message(thread["id"], "research two parts")
            node = "[data-testid=tree] [data-testid=tree-node]"
            await page.wait_for_selector("[data-testid=tree][data-nodes='3']")
            # a child while it works: live, then done (each change pushed, not polled)
            await page.wait_for_selector(f"{node}:has-text('part A')[data-live='1']")
            await shot(page, "22-tree-children-running")
            for part in ("A", "B"):
                await page.wait_for_selector(
                    f"{node}:has-text('part {part}')[data-status=done][data-live='0']",
                    timeout=60_000)
            await page.wait_for_selector(
                f"{node}[data-node='{thread['id']}'][data-live='0']", timeout=60_000)
            await shot(page, "23-tree-children-done")
            reads = [r for r in requests if r.startswith("GET ") and r.endswith("/tree")]
            assert reads and reads == requests  # nothing but tree reads
            turns = [f for f in await page.evaluate("window.__atorFrames")
                     if f["type"] in ("turn.started", "turn.ended")]
            assert len(reads) <= len(turns)  # one read per push at most: no timer
            tree = (await client.ok("GET", f"/v1/threads/{thread['id']}/tree"))["data"]
            assert {c["status"] for c in tree["children"]} == {"done"}
            requests.clear()
            await asyncio.sleep(5)
            assert requests == []  # idle: the tree does not poll
            # a node opens that child's chat
            await page.locator(f"{node}:has-text('part A') [data-testid=tree-link]").click()
            child = next(c for c in tree["children"] if c["title"] == "part A")
            await page.wait_for_url(f"**/ui/threads/{child['id']}")
            await page.wait_for_selector("[data-testid=assistant-message]")
            assert "findings" in await page.locator(
                "[data-testid=assistant-message]").last.inner_text()
            await shot(page, "24-tree-child-chat")
        finally:
            await context.close()
