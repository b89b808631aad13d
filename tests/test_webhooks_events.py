"""The outbound event types beyond `turn.ended`, on real PostgreSQL with a loopback receiver
that verifies every request with the `standardwebhooks` library: `budget.reached` from the
statement that ends a turn on its budget (and not from one that ends done), `run.ended` from
the transaction that ends a workflow run (succeeded or cancelled; none when that transaction
rolls back), `endpoint.disabled` told to the org's other endpoints when one answers 410 or
an admin disables it, and a type an extension registers in one line."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from ator.engine.approvals import Approvals
from ator.errors import ConfigError
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.store import webhook_outbox as hook_store
from ator.store import workflows as run_store
from ator.store.scope import Scope
from ator.webhooks import EventType, EventTypes, Webhooks
from ator.workflows import Workflows
from tests.conftest import ended, new_thread, wait_for_event
from tests.webhook_kit import FAST, scripted, until
from tests.webhook_receiver import Receiver, serve_receiver


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with serve_receiver() as made:
        yield made


def bodies(seen: list[Any], secret: str) -> list[dict[str, Any]]:
    return [Webhook(secret).verify(s.body, s.headers) for s in seen]


async def test_budget_reached_comes_with_the_turn_that_ended_on_its_budget(
        make_ator: Any, receiver: Receiver) -> None:
    async with make_ator(**scripted(), **FAST) as ator:
        await ator.start_jobs()
        # An unpriced model under a budget ends its turn `budget` before any call.
        scope, thread = await new_thread(ator, "s", model="mystery-model",
                                         budget=Decimal("5"))
        hooks = ator.service(Webhooks)
        _, budget_secret = await hooks.create_endpoint(
            scope, url=receiver.url("/budget"), event_types=["budget.reached"])
        _, turn_secret = await hooks.create_endpoint(
            scope, url=receiver.url("/turns"), event_types=["turn.ended"])
        await ator.submit(scope, thread.id, "hello")
        await wait_for_event(ator, scope, thread.id, ended)
        [reached] = bodies(await receiver.wait_for("/budget", 1), budget_secret)
        [turn] = bodies(await receiver.wait_for("/turns", 1), turn_secret)
        assert reached["type"] == "budget.reached" and turn["type"] == "turn.ended"
        assert reached["data"]["turn_id"] == turn["data"]["turn_id"]
        assert reached["data"]["stop_reason"] == "budget"

        done_scope, done_thread = await new_thread(ator, "s")
        await hooks.create_endpoint(done_scope, url=receiver.url("/done-budget"),
                                    event_types=["budget.reached"])
        await hooks.create_endpoint(done_scope, url=receiver.url("/done-turns"))
        await ator.submit(done_scope, done_thread.id, "hello")
        await wait_for_event(ator, done_scope, done_thread.id, ended)
        await receiver.wait_for("/done-turns", 1)
        # Both events of a turn are written by its one final statement: none came.
        assert receiver.at("/done-budget") == []


async def test_approval_requested_comes_with_the_turn_that_ended_waiting(
        make_ator: Any, receiver: Receiver) -> None:
    calls = ScriptedProvider([ScriptStep(tool_calls=[("calculator", {"expression": "2 + 2"})]),
                              ScriptStep(text="four")])
    async with make_ator(providers={"s": calls}, **FAST) as ator:
        await ator.start_jobs()
        org = await ator.create_org(f"wh-{uuid.uuid4().hex[:6]}")
        scope = Scope(org.id)
        setup = await ator.create_setup(scope, name="gated", provider="s", model="scripted",
                                        tool_policy={"approve": ["calculator"]})
        thread = await ator.create_thread(scope, setup.id)
        _, secret = await ator.service(Webhooks).create_endpoint(
            scope, url=receiver.url("/asks"), event_types=["approval.requested"])
        await ator.submit(scope, thread.id, "what is 2 + 2?")
        end = await wait_for_event(ator, scope, thread.id, ended)
        assert end.data["status"] == "waiting", end.data
        [asked] = bodies(await receiver.wait_for("/asks", 1), secret)
        assert asked["type"] == "approval.requested"
        assert asked["data"]["turn_id"] == str(end.turn_id)
        assert asked["data"]["thread_id"] == str(thread.id)
        pending = await ator.service(Approvals).pending(scope)
        assert [(a.name, a.turn_id) for a in pending.actions] == [("calculator", end.turn_id)]


WAITING = {"schema": "ator.workflow/v1", "steps": [{"id": "w", "type": "wait", "seconds": 3600}]}
QUICK = {"schema": "ator.workflow/v1", "steps": [{"id": "t", "type": "transform", "expr": "7"}]}


async def test_run_ended_is_written_with_the_runs_end(make_ator: Any, receiver: Receiver) -> None:
    async with make_ator(**FAST) as ator:
        await ator.start_jobs()
        scope = Scope((await ator.create_org(f"wh-{uuid.uuid4().hex[:6]}")).id)
        hooks, flows = ator.service(Webhooks), ator.service(Workflows)
        _, secret = await hooks.create_endpoint(scope, url=receiver.url("/runs"),
                                                event_types=["run.ended"])
        quick = await flows.create(scope, "quick")
        await flows.publish(scope, quick["id"], QUICK)
        run, _ = await flows.start(scope, quick["id"], {})
        [succeeded] = bodies(await receiver.wait_for("/runs", 1), secret)
        assert succeeded["type"] == "run.ended"
        assert succeeded["data"]["run_id"] == str(run["id"])
        assert succeeded["data"]["status"] == "succeeded"

        waiting = await flows.create(scope, "waiting")
        await flows.publish(scope, waiting["id"], WAITING)
        long, _ = await flows.start(scope, waiting["id"], {})
        # A close whose transaction rolls back writes no event.
        with pytest.raises(RuntimeError):
            async with ator.db.begin() as conn:
                await run_store.cancel(conn, scope, long["id"], "rolled back")
                await run_store.add_event(conn, long["id"], "run_cancelled", {}, bump=False)
                raise RuntimeError("roll back")
        assert (await flows.run(scope, long["id"]))["status"] == "running"
        await flows.cancel(scope, long["id"])
        seen = bodies(await receiver.wait_for("/runs", 2), secret)
        assert seen[1]["data"]["run_id"] == str(long["id"])
        assert seen[1]["data"]["status"] == "cancelled"
        assert seen[1]["data"]["reason"] == "user"
        assert len(seen) == 2


async def test_a_disabled_endpoint_is_told_to_the_org(make_ator: Any, receiver: Receiver) -> None:
    receiver.answers["/gone"] = [410]
    async with make_ator(**FAST) as ator:
        await ator.start_jobs()
        scope = Scope((await ator.create_org(f"wh-{uuid.uuid4().hex[:6]}")).id)
        hooks = ator.service(Webhooks)
        gone, _ = await hooks.create_endpoint(scope, url=receiver.url("/gone"),
                                              event_types=["turn.ended"])
        _, secret = await hooks.create_endpoint(scope, url=receiver.url("/ops"),
                                                event_types=["endpoint.disabled"])
        await hooks.send_test(scope, gone.id)
        [told] = bodies(await receiver.wait_for("/ops", 1), secret)
        assert told["type"] == "endpoint.disabled"
        assert told["data"]["endpoint_id"] == str(gone.id)
        assert "410" in told["data"]["reason"]
        shown = await hooks.get_endpoint(scope, gone.id)
        assert not shown.enabled and shown.disabled_at is not None

        again = await hooks.update_endpoint(scope, gone.id, enabled=True)
        assert again.enabled and again.disabled_reason is None and again.failing_since is None
        await hooks.update_endpoint(scope, gone.id, enabled=False)
        # Disabling what is already disabled tells nobody again.
        await hooks.update_endpoint(scope, gone.id, enabled=False)
        seen = bodies(await receiver.wait_for("/ops", 2), secret)
        assert seen[1]["data"]["reason"] == "disabled by an admin"

        async def settled() -> bool:
            events = [d for e in await hooks.list_endpoints(scope)
                      for d in await hooks.deliveries(scope, e.id)]
            return all(d.status != "pending" for d in events)
        await until(settled)
        assert len(receiver.at("/ops")) == 2


async def test_an_extension_registers_an_event_type_in_one_line(
        make_ator: Any, receiver: Receiver) -> None:
    async with make_ator(**FAST) as ator:
        await ator.start_jobs()
        types = ator.service(EventTypes)
        types.register(EventType("memo.filed", "A memo was filed (a type of the test's own)."))
        with pytest.raises(ConfigError):
            types.register(EventType("memo.filed", "twice"))
        scope = Scope((await ator.create_org(f"wh-{uuid.uuid4().hex[:6]}")).id)
        _, secret = await ator.service(Webhooks).create_endpoint(
            scope, url=receiver.url("/approvals"), event_types=["memo.filed"])
        async with ator.db.begin() as conn:
            assert await hook_store.emit(conn, scope.org_id, "memo.filed", {"call": 1})
            assert not await hook_store.emit(conn, scope.org_id, "run.ended", {})  # unwanted
        [body] = bodies(await receiver.wait_for("/approvals", 1), secret)
        assert body == {"type": "memo.filed", "timestamp": body["timestamp"],
                        "data": {"call": 1}}
