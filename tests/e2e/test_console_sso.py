"""Single sign-on in the console (issue 25), in a real browser (Debian's chromium through
playwright) against a real `ator serve` and the test identity provider (tests/oidc_provider.py,
a real OIDC provider on a port, with a login form): the person starts at the console, goes to
the provider's login page and signs in there, and lands in the console of the org whose SSO it
is, with the role their group maps to. Disabled at the provider, the console's next refresh of
the session is refused and the console shows them signed out."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.async_api import Browser, Response

from tests.e2e.browser import browser, new_context, shot
from tests.e2e.client import script_setup
from tests.e2e.conftest import DeploymentFactory
from tests.oidc_provider import Person, running_provider

pytestmark = pytest.mark.e2e
__all__ = ["browser"]  # the session's browser fixture, used below

_TTL = 4  # seconds an SSO session lasts: the console refreshes it every ~2 s


def _refresh(status: int) -> Callable[[Response], bool]:
    """Matches the console's answers to `POST /v1/sessions/refresh` with `status`."""
    return lambda r: r.url.endswith("/v1/sessions/refresh") and r.status == status


async def test_a_person_signs_in_at_the_identity_provider_and_is_signed_out_once_disabled(
    browser: Browser, deployments: DeploymentFactory,
) -> None:
    async with running_provider() as idp:
        deployment = deployments(ATOR_EGRESS_ALLOW="127.0.0.1", ATOR_SSO_SESSION_TTL=_TTL)
        replica = deployment.start("sso")
        operator = deployment.client(replica)
        org = await operator.ok("POST", "/v1/orgs", 201, json={"name": "acme"})
        made = await operator.ok("POST", f"/v1/orgs/{org['id']}/api-keys", 201, json={
            "name": "admin", "role": "admin", "email": "root@acme.test"})
        admin = deployment.client(replica, made["key"])
        await admin.ok("PUT", "/v1/org/sso", json={
            "issuer": idp.issuer, "client_id": idp.client_id,
            "client_secret": idp.client_secret, "email_domain": "acme.test",
            "role_claim": "groups", "role_map": {"ator-admins": "admin", "staff": "member"},
            "default_role": "viewer"})
        setup = await admin.create_setup(script_setup({"text": "hi"}, name="acme"))
        await admin.create_thread(setup["id"], title="Acme launch plan")
        other = await operator.create_setup(script_setup({"text": "hi"}, name="ops"))
        await operator.create_thread(other["id"], title="Operator only")
        alice = Person("alice-1", "alice@acme.test", groups=["staff"], password="correct horse")
        idp.people = [alice]

        context = await new_context(browser)
        try:
            page = await context.new_page()
            await page.goto(replica.url + "/")
            sso = page.locator("[data-testid=sso]")
            await sso.locator("input[name=org]").fill(org["id"])
            await sso.locator("button[type=submit]").click()
            # The identity provider's own login page, on its own origin.
            await page.wait_for_url(f"{idp.issuer}/authorize?*")
            await shot(page, "25-sso-idp-login")
            await page.fill("input[name=email]", alice.email)
            await page.fill("input[name=password]", "wrong")
            await page.click("button[type=submit]")
            await page.wait_for_selector("[role=alert]:has-text('Wrong email or password')")
            await page.fill("input[name=email]", alice.email)
            await page.fill("input[name=password]", alice.password)
            async with page.expect_response(_refresh(200)):  # the refresh on load
                await page.click("button[type=submit]")

            # Back in the console, signed in: the org's threads, the mapped role.
            await page.wait_for_url(f"{replica.url}/ui/")
            await page.wait_for_selector("[data-testid=connection]:has-text('live')")
            assert (await page.locator("[data-testid=role]").inner_text()).strip() == "member"
            await page.wait_for_selector("text=Acme launch plan")
            assert await page.locator("text=Operator only").count() == 0
            assert await page.locator("header >> text=API keys").count() == 0  # admins only
            who = await page.evaluate(
                "fetch('/v1/sessions/current').then(r => r.json())")
            assert (who["org_id"], who["role"], who["sso"]) == (org["id"], "member", True)
            await shot(page, "25-sso-signed-in")

            # The session is refreshed at the provider while the person is still accepted...
            async with page.expect_response(_refresh(200), timeout=3 * _TTL * 1000):
                pass
            assert (await page.locator("[data-testid=role]").inner_text()).strip() == "member"

            # ...and refused at the next refresh once the provider disabled them.
            alice.disabled = True
            async with page.expect_response(_refresh(401), timeout=3 * _TTL * 1000) as refused:
                pass
            answer: Response = await refused.value
            assert (await answer.json())["code"] == "sso_refused"
            notice = page.locator(".login [role=alert]")
            await notice.wait_for()
            assert "signed out" in (await notice.inner_text())
            await page.wait_for_selector("input[name=key]")
            await shot(page, "25-sso-signed-out")
            gone = await page.evaluate("fetch('/v1/sessions/current').then(r => r.status)")
            assert gone == 401
            # Reloading does not bring the session back.
            await page.reload()
            await page.wait_for_selector("input[name=key]")
            assert await page.locator("[data-testid=connection]").count() == 0
        finally:
            await context.close()
