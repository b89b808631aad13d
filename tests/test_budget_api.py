"""Two-level budgets over the in-process API: the operator's ceiling per org, which the org
cannot raise or clear, and the org admin's own budget at or below it."""

from __future__ import annotations

from typing import Any

from tests.test_api import _org_with_admin, api, auth

__all__ = ["api"]  # the fixture, re-used


async def _org_id(client: Any, key: str) -> str:
    return str((await client.get("/v1/orgs", headers=auth(key))).json()["data"][0]["id"])


async def test_the_operator_sets_a_ceiling_the_org_cannot_lift(api: Any) -> None:
    client, operator, _ = api
    admin = await _org_with_admin(client, operator, "tenant")
    org = await _org_id(client, admin)
    path = f"/v1/orgs/{org}"

    set_ = await client.patch(path, headers=auth(operator), json={"budget_ceiling_usd": "10"})
    assert set_.status_code == 200, set_.text
    assert set_.json()["budget_ceiling_usd"] == "10.000000"
    assert set_.json()["budget_limit_usd"] == "10.000000"

    # The org's admin cannot raise or clear the ceiling.
    for body in ({"budget_ceiling_usd": "1000"}, {"budget_ceiling_usd": None}):
        denied = await client.patch(path, headers=auth(admin), json=body)
        assert denied.status_code == 403, denied.text
        assert denied.json()["code"] == "budget_ceiling_is_operators"
    # Nor set its own budget above it.
    above = await client.patch(path, headers=auth(admin), json={"monthly_budget_usd": "10.01"})
    assert above.status_code == 422 and above.json()["code"] == "budget_above_ceiling"

    # A lower budget of its own is its call; clearing it leaves the ceiling in force.
    lower = await client.patch(path, headers=auth(admin), json={"monthly_budget_usd": "4"})
    assert lower.status_code == 200 and lower.json()["budget_limit_usd"] == "4.000000"
    cleared = await client.patch(path, headers=auth(admin), json={"monthly_budget_usd": None})
    assert cleared.status_code == 200
    assert cleared.json()["monthly_budget_usd"] is None
    assert cleared.json()["budget_limit_usd"] == "10.000000"
    got = (await client.get(path, headers=auth(admin))).json()
    assert (got["budget_ceiling_usd"], got["budget_limit_usd"]) == ("10.000000", "10.000000")

    # The operator lowers the ceiling below the org's budget: the lower one is in force.
    await client.patch(path, headers=auth(admin), json={"monthly_budget_usd": "8"})
    lowered = await client.patch(path, headers=auth(operator), json={"budget_ceiling_usd": "5"})
    assert lowered.json()["budget_limit_usd"] == "5.000000"
    # And may clear it.
    gone = await client.patch(path, headers=auth(operator), json={"budget_ceiling_usd": None})
    assert gone.json()["budget_ceiling_usd"] is None
    assert gone.json()["budget_limit_usd"] == "8.000000"


async def test_an_org_is_created_with_its_ceiling_and_a_budget_at_most_that(api: Any) -> None:
    client, operator, _ = api
    made = await client.post("/v1/orgs", headers=auth(operator), json={
        "name": "capped", "budget_ceiling_usd": "50", "monthly_budget_usd": "20"})
    assert made.status_code == 201, made.text
    assert made.json()["budget_limit_usd"] == "20.000000"
    bad = await client.post("/v1/orgs", headers=auth(operator), json={
        "name": "upside-down", "budget_ceiling_usd": "5", "monthly_budget_usd": "20"})
    assert bad.status_code == 422 and bad.json()["code"] == "budget_above_ceiling"
    for value in ("NaN", "Infinity", "-1"):
        odd = await client.post("/v1/orgs", headers=auth(operator), json={
            "name": "odd", "budget_ceiling_usd": value})
        assert odd.status_code == 422, value


async def test_an_empty_patch_changes_nothing_and_others_see_404(api: Any) -> None:
    client, operator, _ = api
    admin = await _org_with_admin(client, operator, "quiet")
    other = await _org_with_admin(client, operator, "nosy")
    org = await _org_id(client, admin)
    await client.patch(f"/v1/orgs/{org}", headers=auth(admin), json={"monthly_budget_usd": "3"})
    same = await client.patch(f"/v1/orgs/{org}", headers=auth(admin), json={})
    assert same.status_code == 200 and same.json()["monthly_budget_usd"] == "3.000000"
    probe = await client.patch(f"/v1/orgs/{org}", headers=auth(other),
                               json={"budget_ceiling_usd": "1"})
    assert probe.status_code == 404
