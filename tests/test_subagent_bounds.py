"""Subagents stay inside what their parent was given: tools (whatever setup they name), budget
(the org ledger's rule, the same with and without a monthly budget); and what a stop or a
refusal says is exact (issue 17: S5, D2, D4, D5)."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from typing import Any

import httpx
import sqlalchemy as sa

from ator import Scope
from ator.api.app import create_app
from ator.errors import ToolError
from ator.providers.base import ModelRequest
from ator.store import keys as key_store
from ator.store import orgs as org_store
from ator.store import tree as tree_store
from ator.subagents.service import Subagents
from ator.subagents.tools import subagent_tools
from ator.tools.base import Tool, ToolContext
from tests.conftest import new_thread, wait_for_event
from tests.realtime_util import member_key, serve
from tests.subagent_agents import Agents, Reply, results_in, spawned_tool_results
from tests.test_realtime import Client

MODEL = "claude-haiku-4-5"  # priced: a call's worst case is known


async def _probe(args: dict[str, Any], ctx: ToolContext) -> str:
    return "probed"


PROBE = Tool("probe", "a tool the parent may not use", {"type": "object"}, _probe)


async def _done_child_results(ator: Any, scope: Scope, root: uuid.UUID, n: int) -> list[Any]:
    seen: list[Any] = []

    def told(event: Any) -> bool:
        if event.kind == "notification":
            seen.append(event)
        return len(seen) >= n

    await wait_for_event(ator, scope, root, told, timeout=60)
    return seen


async def test_a_child_on_a_more_permissive_setup_gets_only_tools_within_its_parents(
    make_ator,
) -> None:
    def parent(request: ModelRequest) -> Reply:
        if results_in(request) or spawned_tool_results(request):
            return Reply(text="ok")
        return Reply(calls=[("agent_spawn", {"title": "escape", "task": "use probe",
                                             "setup_id": str(open_setup.id)})])

    agents = Agents(parent, lambda task, r: Reply(text="done"))
    async with make_ator(providers={"agents": agents},
                         tools=[PROBE, *subagent_tools()]) as ator:
        org = await ator.create_org("bounded")
        scope = Scope(org.id)
        strict = await ator.create_setup(
            scope, name="strict", provider="agents", model="m",
            tool_policy={"allow": ["agent_*", "setup_list"], "deny": ["agent_abort"]})
        open_setup = await ator.create_setup(scope, name="open", provider="agents", model="m")
        thread = await ator.create_thread(scope, strict.id)
        await ator.ask(scope, thread.id, "go", timeout=30)
        await _done_child_results(ator, scope, thread.id, 1)
        parent_tools = {t.name for t in agents.requests[0].tools}
        assert "probe" not in parent_tools and "agent_abort" not in parent_tools
        (child,) = agents.child_requests
        child_tools = {t.name for t in child.tools}
        assert child_tools <= parent_tools, child_tools - parent_tools
        assert "probe" not in child_tools and "agent_abort" not in child_tools
        assert "agent_spawn" in child_tools  # what the parent had, it keeps


async def _budgeted_child(make_ator: Any, org_budget: Decimal | None,
                          max_usd: str) -> tuple[dict[str, Any], str, int]:
    def parent(request: ModelRequest) -> Reply:
        if results_in(request) or spawned_tool_results(request):
            return Reply(text="ok")
        return Reply(calls=[("agent_spawn", {"title": "thrifty", "task": "answer",
                                             "budget": {"max_usd": float(max_usd)}})])

    agents = Agents(parent, lambda task, r: Reply(text="answer"))
    async with make_ator(providers={"agents": agents}) as ator:
        scope, thread = await new_thread(ator, "agents", model=MODEL, budget=org_budget)
        await ator.ask(scope, thread.id, "go", timeout=30)
        (found,) = await _done_child_results(ator, scope, thread.id, 1)
        return found.data["subagent"], found.data["text"], len(agents.child_requests)


async def test_a_childs_budget_is_checked_the_same_with_and_without_an_org_budget(
    make_ator,
) -> None:
    # The call's worst case (4,096 output tokens at $5/M ≈ $0.02) does not fit in $0.01:
    # refused before any call, with or without an org budget, and not called "spent".
    for org_budget in (None, Decimal("5")):
        meta, text, calls = await _budgeted_child(make_ator, org_budget, "0.01")
        assert (meta["status"], calls) == ("budget", 0), (org_budget, meta, text)
        assert "may cost up to $0.022" in text and "max_usd leaves" in text, text
        assert "is $0.02" not in text  # a reservation is not reported as spend
    # A budget the worst case fits in runs, in both orgs alike.
    for org_budget in (None, Decimal("5")):
        meta, text, calls = await _budgeted_child(make_ator, org_budget, "0.05")
        assert (meta["status"], calls) == ("done", 1), (org_budget, meta, text)


async def test_reservations_in_flight_are_not_a_trees_spend(make_ator) -> None:
    agents = Agents(lambda r: Reply(calls=[("agent_spawn", {"title": "a", "task": "x"})])
                    if not spawned_tool_results(r) else Reply(text="ok"),
                    lambda task, r: Reply(text="done"))
    async with make_ator(providers={"agents": agents}) as ator:
        scope, root = await new_thread(ator, "agents", model=MODEL, budget=Decimal("5"))
        await ator.ask(scope, root.id, "go", timeout=30)
        (found,) = await _done_child_results(ator, scope, root.id, 1)
        child = uuid.UUID(found.data["subagent"]["id"])
        settled = await tree_store.spend(ator.db, scope, child, root.id)
        # A sibling's call in flight holds a reservation: it is not spend of the tree.
        (turn,) = await ator.turns(scope, child)
        await ator.db.fetch(_hold(), {"id": turn.id, "usd": Decimal("3")}, write=True)
        held = await tree_store.spend(ator.db, scope, child, root.id)
        assert (held.usd, held.tree_usd) == (settled.usd, settled.tree_usd)
        assert settled.usd == Decimal(found.data["subagent"]["usd"]) > 0


def _hold() -> Any:
    return sa.text("UPDATE turns SET reserved_usd = :usd WHERE id = :id RETURNING id")


def _hanging_tree() -> Agents:
    def parent(request: ModelRequest) -> Reply:
        if spawned_tool_results(request):
            return Reply(text="waiting")
        return Reply(calls=[("agent_spawn", {"title": "slow", "task": "hang"}),
                            ("agent_spawn", {"title": "slower", "task": "hang"})])

    return Agents(parent, lambda task, r: Reply(hang=True))


async def _idle_root_with_running_children(ator: Any, scope: Scope, root: uuid.UUID) -> None:
    await ator.ask(scope, root, "delegate", timeout=30)
    event = next(e for e in await ator.events(scope, root) if e.kind == "tool_results")
    for r in event.data["results"]:
        await wait_for_event(ator, scope, uuid.UUID(json.loads(r["content"])["id"]),
                             lambda e: e.kind == "turn_started")


async def test_stopping_an_idle_root_says_how_many_descendants_it_stopped_over_http(
    make_ator,
) -> None:
    async with make_ator(providers={"agents": _hanging_tree()}) as ator:
        scope, root = await new_thread(ator, "agents")
        await _idle_root_with_running_children(ator, scope, root.id)
        app = create_app(ator.settings, runtime=ator)
        app.state.ator = ator
        user = await org_store.create_user(ator.db, scope, "m@x", "member")
        _, key = await key_store.create_key(ator.db, scope, user_id=user, name="k",
                                            role="member")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ator") as client:
            stop = await client.post(f"/v1/threads/{root.id}/stop",
                                     headers={"Authorization": f"Bearer {key}"})
            assert stop.status_code == 200, stop.text
            assert stop.json() == {"thread_id": str(root.id), "stop": "idle",
                                   "running": False, "descendants": 2}
            again = await client.post(f"/v1/threads/{root.id}/stop",
                                      headers={"Authorization": f"Bearer {key}"})
            assert again.json()["descendants"] == 0  # already stopped


async def test_stopping_an_idle_root_says_how_many_descendants_it_stopped_on_the_socket(
    make_ator,
) -> None:
    async with make_ator(providers={"agents": _hanging_tree()},
                         rate_limit_per_minute=0) as ator:
        app = create_app(ator.settings, runtime=ator)
        app.state.ator = ator
        app.state.sockets.attach(ator)
        client = Client()
        try:
            async with serve(app) as base:
                scope, root = await new_thread(ator, "agents")
                await _idle_root_with_running_children(ator, scope, root.id)
                await client.connect(base, await member_key(ator, scope, "member"))
                answer = await client.call("stop", thread_id=str(root.id))
                assert answer == {"ok": True, "stop": "idle", "running": False,
                                  "descendants": 2}
                await client.sio.disconnect()
        finally:
            await app.state.sockets.close()


async def test_the_depth_refusal_names_the_depth_the_spawn_would_make(make_ator) -> None:
    async with make_ator(providers={"agents": Agents(lambda r: Reply(text="idle"),
                                                     lambda t, r: Reply(text="quick"))}
                         ) as ator:
        org = await ator.create_org("deep")
        scope = Scope(org.id)
        setup = await ator.create_setup(scope, name="s", provider="agents", model="m",
                                        config={"caps": {"subagent_depth": 1}})
        root = await ator.create_thread(scope, setup.id)
        spawn = next(t for t in subagent_tools() if t.name == "agent_spawn").handler

        def ctx(thread_id: uuid.UUID) -> ToolContext:
            return ToolContext(scope.org_id, thread_id, uuid.uuid4(),
                               f"toolu_{uuid.uuid4().hex}",
                               services={Subagents: ator.service(Subagents)})

        made = await spawn({"title": "a", "task": "quick"}, ctx(root.id))
        try:
            await spawn({"title": "b", "task": "deeper"}, ctx(uuid.UUID(made["id"])))
        except ToolError as exc:
            message = exc.message
        else:
            raise AssertionError("a spawn below the depth cap was allowed")
        assert "would be 2 levels deep, beyond the cap of 1" in message, message
