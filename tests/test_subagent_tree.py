"""The tree of a thread and its subagents, as it runs: over the HTTP API (org-scoped, 404
for another org) and with `ator tree` (a subprocess on the test database)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from ator import Scope
from ator.api.app import create_app
from ator.providers.base import ModelRequest
from ator.store import keys as key_store
from ator.store import orgs as org_store
from ator.store import tree as tree_store
from tests.conftest import new_thread, wait_for_event
from tests.subagent_agents import Agents, Reply, spawned_tool_results
from tests.test_cli import ator as run_cli
from tests.test_cli import cli_env

__all__ = ["cli_env"]


def _parent(request: ModelRequest) -> Reply:
    if spawned_tool_results(request):
        return Reply(text="waiting")
    return Reply(calls=[("agent_spawn", {"title": "slow one", "task": "hang"}),
                        ("agent_spawn", {"title": "fast one", "task": "quick"})])


def _child(task: str, request: ModelRequest) -> Reply:
    return Reply(hang=True) if task == "hang" else Reply(text="fast answer")


@pytest.fixture
async def running_tree(make_ator) -> AsyncIterator[tuple[Any, Scope, Any, list[uuid.UUID]]]:
    """A root whose turn ended, one child still running and one finished (and told)."""
    agents = Agents(_parent, _child)
    async with make_ator(providers={"agents": agents}) as ator:
        scope, root = await new_thread(ator, "agents")
        await ator.ask(scope, root.id, "delegate", timeout=30)
        event = next(e for e in await ator.events(scope, root.id) if e.kind == "tool_results")
        ids = [uuid.UUID(json.loads(r["content"])["id"]) for r in event.data["results"]]
        await wait_for_event(ator, scope, ids[0], lambda e: e.kind == "turn_started")
        await wait_for_event(ator, scope, root.id, lambda e: e.kind == "notification")
        await wait_for_event(ator, scope, ids[1], lambda e: e.kind == "turn_ended")
        yield ator, scope, root, ids


async def _key(ator: Any, scope: Scope, role: str = "viewer") -> str:
    user = await org_store.create_user(ator.db, scope, f"{uuid.uuid4().hex[:6]}@x", role)
    _, key = await key_store.create_key(ator.db, scope, user_id=user, name="k", role=role)
    return key


async def test_the_tree_over_the_api_shows_each_node_and_hides_it_from_other_orgs(
    running_tree,
) -> None:
    ator, scope, root, (slow, _fast) = running_tree
    app = create_app(ator.settings, runtime=ator)
    app.state.ator = ator
    mine = await _key(ator, scope)
    other = await _key(ator, Scope((await ator.create_org("other")).id))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://ator") as client:
        got = await client.get(f"/v1/threads/{root.id}/tree",
                               headers={"Authorization": f"Bearer {mine}"})
        assert got.status_code == 200, got.text
        tree = got.json()["data"]
        assert tree["id"] == str(root.id) and tree["depth"] == 0 and not tree["live"]
        assert tree["status"] == "done"  # its turn that took the fast result ended
        kids = {c["title"]: c for c in tree["children"]}
        assert set(kids) == {"slow one", "fast one"}
        assert kids["slow one"]["live"] and kids["slow one"]["status"] == "running"
        assert not kids["slow one"]["result_delivered"]
        fast_node = kids["fast one"]
        assert (fast_node["live"], fast_node["status"], fast_node["steps"],
                fast_node["tokens"], fast_node["usd"], fast_node["result_delivered"]) == (
            False, "done", 1, 15, "0.000000", True)
        assert fast_node["alias"].startswith("sa-")
        # Another org's thread is not found; a child's tree is its subtree.
        hidden = await client.get(f"/v1/threads/{root.id}/tree",
                                  headers={"Authorization": f"Bearer {other}"})
        assert hidden.status_code == 404
        assert hidden.headers["content-type"].startswith("application/problem+json")
        sub = await client.get(f"/v1/threads/{slow}/tree",
                               headers={"Authorization": f"Bearer {mine}"})
        assert sub.json()["data"]["children"] == []
        bad = await client.get("/v1/threads/not-a-uuid/tree",
                               headers={"Authorization": f"Bearer {mine}"})
        assert bad.status_code == 422
        anon = await client.get(f"/v1/threads/{root.id}/tree")
        assert anon.status_code == 401


async def test_ator_tree_prints_the_tree_as_it_runs(running_tree, cli_env) -> None:
    _ator, scope, root, _ids = running_tree
    result = await run_cli(cli_env, "tree", str(root.id), "--org", str(scope.org_id))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"thread {root.id}  -  [done]  steps=")
    slow_line = next(line for line in lines if "slow one" in line)
    fast_line = next(line for line in lines if "fast one" in line)
    assert slow_line.startswith("  └ sa-") and "[running]" in slow_line
    assert slow_line.endswith("● live")
    assert "[done]  steps=1 tokens=15 $0.000000" in fast_line and "live" not in fast_line
    missing = await run_cli(cli_env, "tree", str(uuid.uuid4()), "--org", str(scope.org_id))
    assert missing.returncode == 1 and "thread not found" in missing.stderr


async def test_an_org_admin_sets_tree_caps_over_the_api_within_the_ceilings(make_ator) -> None:
    async with make_ator(rate_limit_per_minute=1000) as ator:
        app = create_app(ator.settings, runtime=ator)
        app.state.ator = ator
        org = await ator.create_org("capped")
        scope = Scope(org.id)
        admin = await _key(ator, scope, "admin")
        viewer = await _key(ator, scope)
        stranger = await _key(ator, Scope((await ator.create_org("stranger")).id), "admin")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ator") as client:
            def put(key: str, body: Any) -> Any:
                return client.put(f"/v1/orgs/{org.id}/tree-caps", json=body,
                                  headers={"Authorization": f"Bearer {key}"})

            ok = await put(admin, {"subagent_width": 1, "tree_usd": 0.5})
            assert ok.status_code == 200, ok.text
            assert ok.json()["tree_caps"] == {"subagent_width": 1, "tree_usd": 0.5}
            high = await put(admin, {"subagent_depth": 11})
            assert high.status_code == 422 and high.json()["code"] == "cap_above_ceiling"
            unknown = await put(admin, {"max_steps": 3})
            assert unknown.status_code == 422
            assert (await put(admin, {"subagent_live": -1})).status_code == 422
            assert (await put(viewer, {"subagent_width": 2})).status_code == 403
            assert (await put(stranger, {"subagent_width": 2})).status_code == 404
            huge = await client.put(f"/v1/orgs/{org.id}/tree-caps", content=b"{" * 100_000,
                                    headers={"Authorization": f"Bearer {admin}",
                                             "content-type": "application/json"})
            assert huge.status_code in (400, 413, 422)
        # What was set is what a spawn sees: the second child of a parent is refused.
        info = await tree_store.parent_info(ator.db, scope, (await ator.create_thread(
            scope, (await ator.create_setup(scope, name="s", provider="scripted",
                                            model="m")).id)).id)
        assert info.org_caps == {"subagent_width": 1, "tree_usd": 0.5}
