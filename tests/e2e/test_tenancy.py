"""Tenant isolation and roles, walked over every route the running server publishes.

Routes come from the live GET /openapi.json, so a new route is covered (or the test says
which request body or id it needs) without editing a list of routes:

- with a path parameter, another org's id answers exactly like an id that does not exist:
  404 `not_found`, never 200 with data and never 403;
- without one, lists show the caller's org only, also when filtered by another org's ids;
- within one's own org, a viewer key gets 403 (never 404) on every write.

The tenants are made the way an operator would: POST /v1/orgs, then the org's first admin
key with POST /v1/orgs/{org_id}/api-keys.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from tests.e2e.client import Client, script_setup
from tests.e2e.conftest import Deployment, DeploymentFactory
from tests.e2e.replica import Replica

pytestmark = pytest.mark.e2e

WRITES = ("post", "put", "patch", "delete")
# Console login and logout act on the caller's own key and session only, for any role (tested
# in tests/test_sessions.py): no org's resource to reach, nothing a viewer must be denied.
OWN_SESSION = "/v1/sessions"
# The one route whose path names a resource in the *caller's* org whatever it is called:
# PUT of another org's secret name is an upsert of the caller's own secret of that name.
CALLER_SCOPED = {("put", "/v1/secrets/{name}"),
                 # Likewise an org's analysis kind: a PUT names the caller's own kind.
                 ("put", "/v1/analyses/kinds/{kind_name}")}
# Where outside systems send webhooks: no caller org at all (the endpoint's own signature
# authenticates the sender; tests/test_webhooks_api.py), so neither walk applies.
# The single sign-on redirects: a browser not yet signed in starts there (tests/test_sso.py).
UNAUTHENTICATED = {("post", "/v1/hooks/{inbound_id}"), ("post", "/v1/hooks/{inbound_id}/{token}"),
                   ("get", "/v1/sso/{org_id}/login"), ("get", "/v1/sso/callback")}
# The operator's admins manage every org: the org record and its keys, nothing inside it.
OPERATOR_MAY = {("get", "/v1/orgs/{org_id}"), ("patch", "/v1/orgs/{org_id}"),
                ("post", "/v1/orgs/{org_id}/api-keys"), ("put", "/v1/orgs/{org_id}/tree-caps")}
MINTED = "minted-from-outside"  # the name of every key a walk tries to make in another org


@dataclass
class Tenant:
    name: str
    org_id: str
    admin: Client
    viewer: Client | None = None
    ids: dict[str, str] = field(default_factory=dict)  # path/query parameter -> an id of ours
    marks: set[str] = field(default_factory=set)  # strings that must never reach another org


# GET routes that need a query parameter (the walk fills it from the victim's `ids`, so a
# search for the victim's own words must find nothing of theirs).
NEEDS_QUERY = frozenset({"/v1/knowledge/search"})

# POST routes that only check their body (nothing is written, nothing of an org is read).
CHECKS = frozenset({"/v1/workflows/validate"})

# A run that waits an hour: it stays running (and holds one step) while the walks go on.
WAITING_RECIPE = {"schema": "ator.workflow/v1",
                  "steps": [{"id": "w", "type": "wait", "seconds": 3600}]}


@dataclass
class World:
    deployment: Deployment
    operator: Tenant
    a: Tenant
    b: Tenant
    routes: list[tuple[str, str, dict[str, Any]]]  # (method, path, operation)

    def tenant(self, name: str) -> Tenant:
        found: Tenant = getattr(self, name)
        return found


async def populate(tenant: Tenant, deployment: Deployment, replica: Replica) -> None:
    """One of everything, with names that are unique to this tenant."""
    tag = f"{tenant.name}-{uuid.uuid4().hex[:8]}"
    api = tenant.admin
    setup = await api.create_setup(script_setup({"text": f"answer-{tag}"}, name=f"setup-{tag}"))
    thread = await api.create_thread(setup["id"], title=f"title-{tag}")
    await api.post_message(thread["id"], f"text-{tag}")
    end = (await api.follow(thread["id"]))[-1]
    await api.ok("PUT", f"/v1/secrets/secret-{tag}", 204, json={"value": f"value-{tag}"})
    viewer = await api.ok("POST", "/v1/api-keys", 201, json={
        "name": f"viewer-{tag}", "role": "viewer", "email": f"viewer-{tag}@e2e.test"})
    tenant.viewer = deployment.client(replica, viewer["key"])
    server = await api.ok("POST", "/v1/mcp-servers", 201, json={
        "name": f"mcp-{tag}", "url": f"https://mcp-{tag}.example/mcp"})
    await api.ok("PUT", "/v1/org/policy", json={"text": f"policy-{tag}"})
    await api.ok("PUT", f"/v1/threads/{thread['id']}/instructions",
                 json={"text": f"instructions-{tag}"})
    calls = (await api.ok("GET", f"/v1/turns/{end['turn_id']}/calls"))["data"]
    endpoint = await api.ok("POST", "/v1/webhooks/endpoints", 201, json={
        "url": f"https://hooks-{tag}.example/h", "description": f"hooks-{tag}"})
    await api.post_message(thread["id"], f"hooked-{tag}")  # a turn.ended for the endpoint
    await api.follow(thread["id"], after_seq=end["seq"])
    deadline = time.monotonic() + 30
    while not (deliveries := (await api.ok(
            "GET", f"/v1/webhooks/endpoints/{endpoint['id']}/deliveries"))["data"]):
        assert time.monotonic() < deadline, "no delivery was made"
        await asyncio.sleep(0.1)
    inbound = await api.ok("POST", "/v1/webhooks/inbound", 201, json={
        "name": f"in-{tag}", "mapping": {  # fails on this payload: a received request to replay
            "to": "thread", "thread_id": thread["id"], "text": "$string($number(tag))"}})
    body, stamp = json.dumps({"tag": tag}), datetime.now(UTC)
    received = await api.ok("POST", f"/v1/hooks/{inbound['id']}", 202, content=body, headers={
        "webhook-id": f"msg_{tag}", "webhook-timestamp": str(int(stamp.timestamp())),
        "webhook-signature": Webhook(inbound["secret"]).sign(f"msg_{tag}", stamp, body)})
    deadline = time.monotonic() + 30  # settled before any snapshot: mapped, and failed
    while (await api.ok("GET", f"/v1/webhooks/inbound/received/{received['id']}")
           )["status"] != "failed":
        assert time.monotonic() < deadline, "the received webhook was never mapped"
        await asyncio.sleep(0.1)
    workflow = await api.ok("POST", "/v1/workflows", 201, json={"name": f"wf-{tag}"})
    await api.ok("POST", f"/v1/workflows/{workflow['id']}/versions", 201,
                 json={"recipe": WAITING_RECIPE})
    run = await api.ok("POST", f"/v1/workflows/{workflow['id']}/runs", 201,
                       json={"input": {}, "key": f"run-{tag}"})
    schedule = await api.ok("POST", "/v1/schedules", 201, json={
        "name": f"s-{tag}", "cron": "0 0 1 1 *", "target": {"workflow_id": workflow["id"]}})
    deadline = time.monotonic() + 30
    while not (steps := (await api.ok("GET", f"/v1/runs/{run['id']}/steps"))["data"]):
        assert time.monotonic() < deadline, "the run made no step"
        await asyncio.sleep(0.1)
    # A gated call: the turn ends waiting with one pending approval (kept pending).
    gated = await api.create_setup({**script_setup(
        {"tool_calls": [{"name": "calculator", "input": {"expression": "1 + 1"}}]},
        {"text": "done"}, name=f"gated-{tag}"), "tool_policy": {"approve": ["calculator"]}})
    gated_thread = await api.create_thread(gated["id"], title=f"gated-{tag}")
    await api.post_message(gated_thread["id"], f"gated-{tag}")
    assert (await api.follow(gated_thread["id"]))[-1]["data"]["status"] == "waiting"
    approval = (await api.ok("GET", "/v1/approvals"))["data"][0]
    kind_name = f"kind_{tag.replace('-', '_')}"
    await api.ok("PUT", f"/v1/analyses/kinds/{kind_name}", json={"spec": analysis_spec(tag)})
    await api.ok("POST", "/v1/analyses/runs", 202, json={
        "kind": kind_name, "target": f"target-{tag}", "options": {"payload": {"t": tag}}})
    deadline = time.monotonic() + 30
    while not (analyses := (await api.ok("GET", "/v1/analyses"))["data"]):
        assert time.monotonic() < deadline, "the analysis did not run"
        await asyncio.sleep(0.1)
    document = await api.ok("POST", "/v1/documents", 201, json={
        "title": f"doc-{tag}", "text": f"# Handbook {tag}\n\nThe word {tag} is ours."})
    # What the walk searches for: a word of the document's only (the tag's hex part), since
    # the searcher's own query log shows its query; the whole tag stays a mark of ours.
    word = tag.split("-")[1]
    found = await api.ok("GET", "/v1/knowledge/search", params={"q": word})
    assert found["data"][0]["document_id"] == document["id"], found
    tenant.ids = {
        "action_id": approval["id"], "document_id": document["id"], "q": word,
        "org_id": tenant.org_id, "setup_id": setup["id"], "thread_id": thread["id"],
        "turn_id": end["turn_id"], "key_id": viewer["id"], "name": f"secret-{tag}",
        "parent_id": thread["id"], "server_id": server["id"], "call_id": str(calls[0]["id"]),
        "endpoint_id": endpoint["id"], "delivery_id": deliveries[0]["id"],
        "inbound_id": inbound["id"], "received_id": received["id"],
        "workflow_id": workflow["id"], "version": "1", "run_id": run["id"],
        "step_id": steps[0]["id"], "schedule_id": schedule["id"],
        "kind_name": kind_name, "analysis_id": analyses[0]["id"],
    }
    # A call id is a small integer, found in any response: it is no mark of the tenant.
    tenant.marks = {*(v for k, v in tenant.ids.items() if k not in ("call_id", "version", "q")),
                    tag,
                    viewer["user_id"], viewer["prefix"]}


def analysis_spec(tag: str) -> dict[str, Any]:
    """An org's analysis kind answered by a scripted model with this tenant's mark."""
    return {"input": {"source": "payload"},
            "model": {"provider": "scripted", "model": "scripted",
                      "config": {"script": [{"text": json.dumps({"note": f"note-{tag}"})}]}},
            "output_schema": {"type": "object", "required": ["note"]},
            "rule": {"output": {"note": "rule"}}}


@pytest.fixture(scope="module")
async def world(deployments: DeploymentFactory) -> World:
    deployment = deployments()
    replica = deployment.start("tenancy")
    operator_api = deployment.client(replica)
    orgs = (await operator_api.ok("GET", "/v1/orgs"))["data"]
    operator = Tenant("operator", orgs[0]["id"], operator_api)
    tenants = []
    for name in ("a", "b"):
        org = await operator_api.ok("POST", "/v1/orgs", 201,
                                    json={"name": f"org-{name}", "monthly_budget_usd": "100"})
        key = await operator_api.ok("POST", f"/v1/orgs/{org['id']}/api-keys", 201, json={
            "name": f"admin-{name}", "role": "admin", "email": f"admin-{name}@e2e.test"})
        tenant = Tenant(name, org["id"], deployment.client(replica, key["key"]))
        await populate(tenant, deployment, replica)
        tenants.append(tenant)
    spec = (await operator_api.ok("GET", "/openapi.json"))
    routes = [(method, path, op) for path, ops in spec["paths"].items()
              for method, op in ops.items()]
    return World(deployment, operator, tenants[0], tenants[1], routes)


def path_params(op: dict[str, Any]) -> list[str]:
    return [p["name"] for p in op.get("parameters", []) if p["in"] == "path"]


def body_for(method: str, path: str, op: dict[str, Any], victim: Tenant,
             victim_org: dict[str, Any]) -> dict[str, Any] | None:
    """A valid request body, so a request fails (or not) on who asks, not on what it says."""
    if "requestBody" not in op:
        return None
    bodies: dict[tuple[str, str], dict[str, Any]] = {
        ("post", "/v1/orgs"): {"name": "made-by-a-tenant"},
        # The victim's own budget: a no-op for the operator (who may), a probe for others.
        ("patch", "/v1/orgs/{org_id}"): {"monthly_budget_usd": victim_org["monthly_budget_usd"]},
        ("post", "/v1/api-keys"): {"name": "k", "role": "viewer",
                                   "email": f"{uuid.uuid4().hex[:8]}@e2e.test"},
        ("post", "/v1/orgs/{org_id}/api-keys"): {"name": MINTED, "role": "admin",
                                                 "email": f"{uuid.uuid4().hex[:8]}@e2e.test"},
        ("put", "/v1/secrets/{name}"): {"value": "overwritten"},
        ("put", "/v1/orgs/{org_id}/tree-caps"): {"subagent_width": 8},
        ("post", "/v1/setups"): script_setup({"text": "x"}),
        ("patch", "/v1/setups/{setup_id}"): {"name": "renamed-from-outside"},
        ("post", "/v1/threads"): {"setup_id": victim.ids["setup_id"]},
        ("post", "/v1/threads/{thread_id}/messages"): {"text": "from another org"},
        ("post", "/v1/mcp-servers"): {"name": "made-by-a-tenant",
                                      "url": "https://made.example/mcp"},
        ("patch", "/v1/mcp-servers/{server_id}"): {"enabled": False},
        ("put", "/v1/org/policy"): {"text": "policy-from-outside"},
        ("put", "/v1/org/retention"): {"trash_days": 3},
        ("put", "/v1/threads/{thread_id}/voice"): {"enabled": True},
        ("put", "/v1/org/sso"): {"issuer": "https://idp.example", "client_id": "made"},
        ("put", "/v1/threads/{thread_id}/instructions"): {"text": "from another org"},
        ("post", "/v1/webhooks/endpoints"): {"url": "https://made.example/hook"},
        ("post", "/v1/webhooks/inbound"): {"name": "made-by-a-tenant", "mapping": {
            "to": "thread", "thread_id": victim.ids["thread_id"], "text": "x"}},
        ("patch", "/v1/webhooks/inbound/{inbound_id}"): {"name": "renamed-from-outside"},
        ("patch", "/v1/webhooks/endpoints/{endpoint_id}"): {"description": "from outside",
                                                            "enabled": False},
        ("post", "/v1/webhooks/endpoints/{endpoint_id}/rotate-secret"): {"overlap_s": 60},
        ("post", "/v1/workflows/validate"): {"recipe": WAITING_RECIPE},
        ("post", "/v1/workflows"): {"name": "made-by-a-tenant"},
        ("post", "/v1/workflows/{workflow_id}/versions"): {"recipe": WAITING_RECIPE},
        ("post", "/v1/workflows/{workflow_id}/runs"): {"input": {}},
        ("post", "/v1/schedules"): {"name": "made-by-a-tenant", "cron": "0 0 1 1 *",
                                    "target": {"workflow_id": victim.ids["workflow_id"]}},
        ("post", "/v1/runs/{run_id}/pause"): {"reason": "from another org"},
        ("post", "/v1/runs/{run_id}/resume"): {"reason": "from another org"},
        ("post", "/v1/runs/{run_id}/cancel"): {"reason": "from another org"},
        ("post", "/v1/documents"): {"title": "made-by-a-tenant", "text": "from outside"},
        ("post", "/v1/documents/{document_id}/versions"): {"text": "from another org"},
        ("post", "/v1/webhooks/endpoints/{endpoint_id}/replay"): {
            "since": "2000-01-01T00:00:00Z", "until": "2100-01-01T00:00:00Z"},
        ("post", "/v1/approvals/{action_id}/decision"): {"decision": "deny",
                                                          "reason": "from another org"},
        ("put", "/v1/approvals/settings"): {"approve_mcp_writes": False},
        ("put", "/v1/analyses/kinds/{kind_name}"): {"spec": analysis_spec("outside")},
        ("post", "/v1/analyses/runs"): {"kind": victim.ids["kind_name"], "target": "t",
                                        "options": {"payload": {"x": 1}}},
        ("post", "/v1/analyses/schedules"): {"kind": victim.ids["kind_name"], "target": "t",
                                             "cron": "0 6 * * *"},
    }
    assert (method, path) in bodies, f"add a valid request body for {method.upper()} {path}"
    return bodies[(method, path)]


def fill(path: str, ids: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        assert name in ids, f"add an id for the path parameter {name!r}"
        return ids[name]

    return re.sub(r"\{(\w+)\}", one, path)


def nobody() -> dict[str, str]:
    """Ids of nothing at all."""
    return {"org_id": str(uuid.uuid4()), "setup_id": str(uuid.uuid4()),
            "thread_id": str(uuid.uuid4()), "turn_id": str(uuid.uuid4()),
            "key_id": str(uuid.uuid4()), "name": f"no-such-{uuid.uuid4().hex[:8]}",
            "parent_id": str(uuid.uuid4()), "server_id": str(uuid.uuid4()),
            "call_id": str(2**62 + uuid.uuid4().int % 2**40),
            "endpoint_id": str(uuid.uuid4()), "delivery_id": str(uuid.uuid4()),
            "inbound_id": str(uuid.uuid4()), "received_id": str(uuid.uuid4()),
            "workflow_id": str(uuid.uuid4()), "version": "1", "run_id": str(uuid.uuid4()),
            "step_id": str(uuid.uuid4()), "schedule_id": str(uuid.uuid4()),
            "action_id": str(uuid.uuid4()), "kind_name": f"no_such_{uuid.uuid4().hex[:8]}",
            "analysis_id": str(uuid.uuid4()), "document_id": str(uuid.uuid4())}


def leaks(text: str, tenant: Tenant) -> set[str]:
    return {mark for mark in tenant.marks if mark in text}


def outcome(response: httpx.Response) -> tuple[int, str | None]:
    code = None
    if response.headers.get("content-type", "").startswith("application/problem+json"):
        code = response.json()["code"]
    return response.status_code, code


async def snapshot(tenant: Tenant) -> dict[str, Any]:
    """What the tenant sees of its own data; a walk by anyone else must not change it."""
    api, ids = tenant.admin, tenant.ids
    keys = (await api.ok("GET", "/v1/api-keys"))["data"]
    return {
        "org": await api.ok("GET", f"/v1/orgs/{tenant.org_id}"),
        "setups": await api.ok("GET", "/v1/setups", params={"include_archived": True}),
        "threads": await api.ok("GET", "/v1/threads"),
        "events": await api.events(ids["thread_id"]),
        "turns": await api.turns(ids["thread_id"]),
        "keys": [{k: v for k, v in key.items() if k != "last_used_at"} for key in keys],
        "secrets": await api.ok("GET", "/v1/secrets"),
        "mcp_servers": await api.ok("GET", "/v1/mcp-servers"),
        "usage": await api.ok("GET", "/v1/usage", params={"group_by": "thread"}),
        "policy": await api.ok("GET", "/v1/org/policy"),
        "retention": await api.ok("GET", "/v1/org/retention"),
        "sso": await api.ok("GET", "/v1/org/sso"),
        "instructions": await api.ok("GET", f"/v1/threads/{ids['thread_id']}/instructions"),
        "calls": await api.ok("GET", f"/v1/turns/{ids['turn_id']}/calls"),
        "webhooks": await api.ok("GET", "/v1/webhooks/endpoints"),
        "inbound": await api.ok("GET", f"/v1/webhooks/inbound/{ids['inbound_id']}"),
        "approval": await api.ok("GET", f"/v1/approvals/{ids['action_id']}"),
        "approvals": await api.ok("GET", "/v1/approvals/settings"),
        "inbound_list": await api.ok("GET", "/v1/webhooks/inbound"),
        "received": await api.ok("GET", f"/v1/webhooks/inbound/{ids['inbound_id']}/received"),
        "analyses": await api.ok("GET", "/v1/analyses"),
        "analysis_kinds": await api.ok("GET", "/v1/analyses/kinds"),
        "analysis_stats": await api.ok("GET", "/v1/analyses/stats"),
        "documents": await api.ok("GET", "/v1/documents"),
        "document": await api.ok("GET", f"/v1/documents/{ids['document_id']}"),
        "unanswered": await api.ok("GET", "/v1/knowledge/queries",
                                   params={"answered": "false"}),
    }


@pytest.mark.parametrize(("attacker", "victim"), [("b", "a"), ("a", "b"), ("operator", "a")])
async def test_another_orgs_ids_are_not_found_on_every_route(
    world: World, attacker: str, victim: str
) -> None:
    them, us = world.tenant(victim), world.tenant(attacker)
    before = await snapshot(them)
    walked = []
    for method, path, op in world.routes:
        if not path_params(op) or (method, path) in CALLER_SCOPED | UNAUTHENTICATED:
            continue
        body = body_for(method, path, op, them, before["org"])
        params = {"wait": 1} if path.endswith("/events") else None  # the long-poll path too
        theirs = await us.admin.request(method, fill(path, them.ids), json=body, params=params)
        missing = await us.admin.request(method, fill(path, nobody()), json=body, params=params)
        walked.append(f"{method.upper()} {path}")
        if us is world.operator and (method, path) in OPERATOR_MAY:
            assert theirs.status_code in (200, 201), (method, path, theirs.text)
            continue
        assert outcome(theirs) == (404, "not_found"), (method, path, theirs.text)
        assert outcome(theirs) == outcome(missing), (method, path)
        assert not leaks(theirs.text, them), (method, path)
    assert len(walked) >= 14, walked

    # PUT /v1/secrets/{name} with their secret's name makes our own secret of that name.
    name = them.ids["name"]
    await us.admin.ok("PUT", f"/v1/secrets/{name}", 204, json={"value": "ours"})
    assert {"name": name} in (await us.admin.ok("GET", "/v1/secrets"))["data"]
    await us.admin.ok("DELETE", f"/v1/secrets/{name}", 204)

    after = await snapshot(them)
    if us is world.operator:  # minting a key in any org is what the operator may do
        minted = [k for k in after["keys"] if k not in before["keys"]]
        assert [k["name"] for k in minted] == [MINTED]
        after["keys"] = [k for k in after["keys"] if k in before["keys"]]
    assert after == before


@pytest.mark.parametrize(("attacker", "victim"), [("b", "a"), ("a", "b")])
async def test_routes_without_path_parameters_show_only_the_callers_org(
    world: World, attacker: str, victim: str
) -> None:
    them, us = world.tenant(victim), world.tenant(attacker)
    before = await snapshot(them)
    for method, path, op in world.routes:
        if path_params(op) or not path.startswith("/v1/") or path.startswith(OWN_SESSION) \
                or (method, path) in UNAUTHENTICATED:
            continue
        if method == "get":
            # Filter by each of their ids the route accepts as a query parameter, too.
            filters = [p["name"] for p in op.get("parameters", []) if p["name"] in them.ids]
            plain: list[dict[str, str]] = [] if path in NEEDS_QUERY else [{}]
            for params in [*plain, *({name: them.ids[name]} for name in filters)]:
                response = await us.admin.request("GET", path, params=params)
                assert response.status_code == 200, (path, params, response.text)
                assert not leaks(response.text, them), (path, params)
                if params:
                    assert response.json()["data"] == [], (path, params)
        elif method == "post":
            body = body_for(method, path, op, them, before["org"])
            response = await us.admin.request("POST", path, json=body)
            if path in CHECKS:  # a pure check of the body: it writes and reads nothing
                assert response.status_code == 200, (path, response.text)
                assert not leaks(response.text, them), path
                continue
            assert response.status_code in (201, 404, 422), (path, response.text)
            assert not leaks(response.text, them), path
            if path == "/v1/threads":  # their setup id, in a body: as if it did not exist
                missing = await us.admin.request("POST", path,
                                                 json={"setup_id": str(uuid.uuid4())})
                assert outcome(response) == outcome(missing)
                assert response.status_code in (404, 422)
    orgs = (await us.admin.ok("GET", "/v1/orgs"))["data"]
    assert [o["id"] for o in orgs] == [us.org_id]
    assert await snapshot(them) == before


async def test_a_viewer_gets_403_on_every_write_in_its_own_org(world: World) -> None:
    tenant = world.a
    assert tenant.viewer is not None
    before = await snapshot(tenant)
    checked = []
    for method, path, op in world.routes:
        if method not in WRITES or not path.startswith("/v1/") or path.startswith(OWN_SESSION) \
                or (method, path) in UNAUTHENTICATED:
            continue
        body = body_for(method, path, op, tenant, before["org"])
        response = await tenant.viewer.request(method, fill(path, tenant.ids), json=body)
        assert outcome(response) == (403, "forbidden"), (method, path, response.text)
        checked.append(f"{method.upper()} {path}")
    assert len(checked) >= 12, checked
    for path in ("/v1/api-keys", "/v1/secrets"):  # admin-only reads
        assert outcome(await tenant.viewer.request("GET", path)) == (403, "forbidden")
    # Reads a viewer may do, on its own org's ids.
    for path in ("/v1/threads/{thread_id}", "/v1/setups/{setup_id}", "/v1/turns/{turn_id}",
                 "/v1/orgs/{org_id}"):
        await tenant.viewer.ok("GET", fill(path, tenant.ids))
    assert await snapshot(tenant) == before
