"""Retention and purge: the trash purged after its period with every row that hangs off a
thread (found through the catalog, so a table added later is checked too), usage unchanged
by a purge, consumed mailbox items and archived setups by age, a purge of 100,000 events in
bounded statements, the org's schedule firing the purge job, the audit and the policy's
bounds. The clock is a `ManualClock` handed to the service."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from ator import Scope
from ator.errors import ValidationFailed
from ator.jobs import JobKinds, ManualClock, Scheduler
from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage
from ator.retention import KIND, Retention
from ator.store import retention as retention_store
from ator.store import usage as usage_store
from ator.store.retention import Bounds, Timing

MODEL = "claude-haiku-4-5"


class Honest:
    """Answers "ok", reporting 10 input and 10 output tokens (priced)."""

    name = "honest"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        yield TextDelta("ok")
        yield MessageStop("end_turn", Usage(10, 10), request.model)


async def _tables_with_thread_id(ator: Any) -> list[str]:
    rows = await ator.db.read(sa.text(
        "SELECT table_name AS t FROM information_schema.columns WHERE column_name = "
        "'thread_id' AND table_schema = current_schema()"))
    return sorted(r.t for r in rows)


async def _rows_of(ator: Any, ids: list[uuid.UUID]) -> dict[str, int]:
    """Rows naming any of `ids`, per table with a thread_id (and the threads themselves)."""
    found: dict[str, int] = {}
    for table in await _tables_with_thread_id(ator):
        if table == "usage_purged":
            continue  # the money of purged threads, kept on purpose
        n = (await ator.db.read(sa.text(
            f'SELECT count(*) AS n FROM "{table}" WHERE thread_id = ANY(CAST(:ids AS uuid[]))'),
            {"ids": ids}))[0].n
        found[table] = int(n)
    found["threads"] = int((await ator.db.read(sa.text(
        "SELECT count(*) AS n FROM threads WHERE id = ANY(CAST(:ids AS uuid[]))"),
        {"ids": ids}))[0].n)
    return found


async def _hang_off(ator: Any, scope: Scope, thread_id: uuid.UUID) -> None:
    """Rows of the kinds a turn does not write here: a stored tool result, a provider
    session, a thread prompt version."""
    await ator.db.write(sa.text(
        "INSERT INTO tool_results (id, org_id, thread_id, content) VALUES (:id, :o, :t, 'x')"),
        {"id": uuid.uuid4(), "o": scope.org_id, "t": thread_id})
    await ator.db.write(sa.text(
        "INSERT INTO provider_sessions (org_id, thread_id, provider, state) "
        "VALUES (:o, :t, 'cli', '{}'::jsonb)"), {"o": scope.org_id, "t": thread_id})
    await ator.db.write(sa.text(
        "INSERT INTO prompt_versions (org_id, layer, thread_id, version, text) "
        "VALUES (:o, 'thread', :t, 1, 'be brief')"), {"o": scope.org_id, "t": thread_id})


async def _child_of(ator: Any, scope: Scope, parent: Any) -> uuid.UUID:
    """A subagent thread under `parent`, with a turn of its own."""
    child = uuid.uuid4()
    await ator.db.write(sa.text(
        "INSERT INTO threads (id, org_id, setup_id, parent_id, root_id, depth, spawned_by) "
        "VALUES (:id, :o, :s, :p, :p, 1, 'toolu_1')"),
        {"id": child, "o": scope.org_id, "s": parent.setup_id, "p": parent.id})
    result = await ator.ask(scope, child, "sub", timeout=30)
    assert result.stop_reason == "end_turn"
    # The child's result reaches the parent as a notice, which runs a turn of the parent's
    # after the child's ask returns: the parent's rows are counted once that turn has ended.
    async with asyncio.timeout(30):
        while True:
            kinds = [r.kind for r in await ator.db.read(sa.text(
                "SELECT kind FROM events WHERE thread_id = :t ORDER BY seq"), {"t": parent.id})]
            if "notification" in kinds and kinds[-1] == "turn_ended":
                return child
            await asyncio.sleep(0.05)


def _usage_of(rows: list[dict[str, Any]]) -> dict[str | None, tuple[Any, ...]]:
    return {r["key"]: (r["calls"], r["input_tokens"], r["output_tokens"], r["cost_usd"])
            for r in rows}


async def _usage(ator: Any, scope: Scope) -> dict[str, Any]:
    month = date.today()
    return {g: _usage_of(await usage_store.usage(ator.db, scope, month=month, group=g))
            for g in usage_store.GROUPS}


async def test_a_thread_31_days_in_the_trash_is_purged_with_all_its_rows_29_days_is_not(
        make_ator) -> None:
    async with make_ator(providers={"h": Honest()}) as ator:
        scope = Scope((await ator.create_org("trash")).id)
        setup = await ator.create_setup(scope, name="s", provider="h", model=MODEL)
        old = await ator.create_thread(scope, setup.id)
        young = await ator.create_thread(scope, setup.id)
        for thread in (old, young):
            for text in ("one", "two"):
                assert (await ator.ask(scope, thread.id, text, timeout=30)).stop_reason \
                    == "end_turn"
            await _hang_off(ator, scope, thread.id)
        child = await _child_of(ator, scope, old)
        gone = [old.id, child]
        before = await _rows_of(ator, gone)
        # Every kind of row is there to be purged (a turn, its events, calls, mailbox...).
        for table in ("events", "turns", "model_calls", "mailbox", "tool_results",
                      "provider_sessions", "prompt_versions", "threads"):
            assert before[table] > 0, table
        kept_before = await _rows_of(ator, [young.id])
        usage_before = await _usage(ator, scope)

        await ator.delete_thread(scope, old.id)
        await ator.delete_thread(scope, young.id)
        deleted_at = (await ator.db.read(sa.text(
            "SELECT deleted_at FROM threads WHERE id = :id"), {"id": old.id}))[0].deleted_at
        # The young thread went to the trash two days after the old one.
        await ator.db.write(sa.text(
            "UPDATE threads SET deleted_at = :at WHERE id = :id"),
            {"at": deleted_at + timedelta(days=2), "id": young.id})

        retention = ator.service(Retention)
        # Consumed mailbox items age out on their own (7 days): not what this test is about.
        await retention.set_policy(scope, {"mailbox_days": 365})
        retention.clock = ManualClock(deleted_at + timedelta(days=31))
        report = await retention.purge_now(scope)

        assert report.threads == 1
        after = await _rows_of(ator, gone)
        assert after == dict.fromkeys(after, 0), after
        assert await _rows_of(ator, [young.id]) == kept_before
        assert await _usage(ator, scope) == usage_before  # the money did not move
        audit = await retention.audit(scope)
        assert [(a.what, a.subject_id) for a in audit] == [("thread", old.id)]
        assert audit[0].rows["events"] == before["events"]
        assert audit[0].rows["threads"] == 2
        # Two days later the young one goes too.
        retention.clock = ManualClock(deleted_at + timedelta(days=33))
        await retention.purge_now(scope)
        assert await _rows_of(ator, [young.id]) == dict.fromkeys(kept_before, 0)
        assert await _usage(ator, scope) == usage_before


async def test_purging_100000_events_runs_in_bounded_statements(make_ator) -> None:
    async with make_ator(providers={"h": Honest()}) as ator:
        scope = Scope((await ator.create_org("big")).id)
        setup = await ator.create_setup(scope, name="s", provider="h", model=MODEL)
        thread = await ator.create_thread(scope, setup.id)
        await ator.db.write(sa.text("""
            INSERT INTO events (org_id, thread_id, seq, kind, data)
            SELECT :o, :t, g, 'message', jsonb_build_object('text', repeat('x', 200))
              FROM generate_series(1, 100000) AS g"""), {"o": scope.org_id, "t": thread.id})
        await ator.delete_thread(scope, thread.id)
        # statement_timeout 1 s: any statement running longer fails the purge itself.
        retention = Retention(ator.db, ator.settings,
                              clock=ManualClock(datetime.now(UTC) + timedelta(days=31)),
                              bounds=Bounds(batch=5000, statement_timeout=1.0))
        report = await retention.purge_now(scope)
        timing: Timing = report.timing
        assert report.rows["events"] == 100_000
        assert timing.largest <= 5000
        assert timing.statements >= 100_000 // 5000
        assert (await _rows_of(ator, [thread.id]))["events"] == 0
        print(f"\n100,000 events: {timing.statements} statements, largest {timing.largest} "
              f"rows, slowest {timing.slowest * 1000:.0f} ms")


async def test_consumed_mailbox_items_and_unused_archived_setups_age_out(make_ator) -> None:
    async with make_ator(providers={"h": Honest()}) as ator:
        scope = Scope((await ator.create_org("aged")).id)
        used = await ator.create_setup(scope, name="used", provider="h", model=MODEL)
        unused = await ator.create_setup(scope, name="unused", provider="h", model=MODEL)
        thread = await ator.create_thread(scope, used.id)
        await ator.ask(scope, thread.id, "hi", timeout=30)
        await ator.archive_setup(scope, used.id)
        await ator.archive_setup(scope, unused.id)
    # No engine from here: no reaper's sweep turns the pending item below into a turn.
    async with make_ator(providers={"h": Honest()}, engine=False) as ator:
        # One consumed item 8 days old and one pending (never aged out).
        await ator.db.write(sa.text(
            "UPDATE mailbox SET created_at = now() - interval '8 days' WHERE thread_id = :t"),
            {"t": thread.id})
        await ator.db.write(sa.text(
            "INSERT INTO mailbox (id, org_id, thread_id, client_message_id, kind, content, "
            "created_at) VALUES (:id, :o, :t, 'late', 'message', '{}'::jsonb, "
            "now() - interval '9 days')"),
            {"id": uuid.uuid4(), "o": scope.org_id, "t": thread.id})
        retention = ator.service(Retention)
        retention.clock = ManualClock(datetime.now(UTC) + timedelta(days=31))
        report = await retention.purge_now(scope)
        assert report.rows["mailbox"] == 1
        left = await ator.db.read(sa.text(
            "SELECT client_message_id FROM mailbox WHERE thread_id = :t"), {"t": thread.id})
        assert [r.client_message_id for r in left] == ["late"]
        # The setup a live thread still uses stays; the unused one went.
        ids = {s.id for s in await ator.setups(scope, include_archived=True)}
        assert ids == {used.id}
        assert report.setups == 1
        assert {a.what for a in await retention.audit(scope)} == {"mailbox", "setup"}


async def test_the_policy_is_bounded_and_defaults_to_the_operators(make_ator) -> None:
    async with make_ator(retention_trash_days=30, retention_min_days=2,
                         retention_max_days=400) as ator:
        scope = Scope((await ator.create_org("policy")).id)
        retention = ator.service(Retention)
        assert (await retention.policy(scope)).trash_days == 30
        assert (await retention.set_policy(scope, {"trash_days": 10})).trash_days == 10
        for bad in ({"trash_days": 1}, {"mailbox_days": 401}, {"nope_days": 3},
                    {"runs_days": True}):
            with pytest.raises(ValidationFailed):
                await retention.set_policy(scope, bad)
        assert (await retention.set_policy(scope, {"events_days": 0})).events_days == 0
        assert (await retention.set_policy(scope, {"trash_days": None})).trash_days == 30


async def wait_until(check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def test_the_orgs_schedule_fires_the_purge_job(make_ator) -> None:
    async with make_ator(providers={"h": Honest()}) as ator:
        scope = Scope((await ator.create_org("scheduled")).id)
        setup = await ator.create_setup(scope, name="s", provider="h", model=MODEL)
        thread = await ator.create_thread(scope, setup.id)
        await ator.delete_thread(scope, thread.id)
        await ator.db.write(sa.text(
            "UPDATE threads SET deleted_at = now() - interval '40 days' WHERE id = :id"),
            {"id": thread.id})
        retention = ator.service(Retention)
        await retention.ensure_schedules()
        tick = await retention_store.schedule_of(ator.db, scope, "ator.retention")
        assert tick is not None
        kinds = ator.service(JobKinds)
        assert KIND in kinds
        # Every org of the shared test database has its schedule at the same tick: only this
        # org's may fire here (hundreds of purges would fill the queue of the tests after it).
        await ator.db.write(sa.text(
            "UPDATE schedules SET next_tick = next_tick + interval '3650 days' "
            "WHERE name = 'ator.retention' AND org_id <> :org"), {"org": scope.org_id})
        await Scheduler(ator.db, kinds, clock=ManualClock(tick[0] + timedelta(seconds=1))
                        ).tick()
        await ator.start_jobs()

        async def purged() -> bool:
            return not (await ator.db.read(sa.text(
                "SELECT 1 FROM threads WHERE id = :id"), {"id": thread.id}))

        await wait_until(purged)
        assert [a.what for a in await retention.audit(scope)] == ["thread"]


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_the_retention_routes_by_role_and_org(make_ator) -> None:
    from tests.conftest import operator_client

    async with operator_client(make_ator, rate_limit_per_minute=10_000) as (client, op, ator):
        keys, orgs = {}, {}
        for name in ("a", "b"):
            org = (await client.post("/v1/orgs", json={"name": f"r-{uuid.uuid4().hex[:6]}"},
                                     headers=auth(op))).json()
            orgs[name] = Scope(uuid.UUID(org["id"]))
            for role in ("admin", "viewer"):
                made = await client.post(f"/v1/orgs/{org['id']}/api-keys", headers=auth(op),
                                         json={"name": role, "role": role,
                                               "email": f"{role}@{name}.x"})
                keys[name, role] = made.json()["key"]
        a = auth(keys["a", "admin"])
        setup = (await client.post("/v1/setups", headers=a, json={
            "name": "s", "provider": "scripted", "model": "scripted",
            "config": {"script": [{"text": "ok"}], "repeat_last": True}})).json()
        thread = (await client.post("/v1/threads", headers=a,
                                    json={"setup_id": setup["id"]})).json()
        await ator.ask(orgs["a"], uuid.UUID(thread["id"]), "hi", timeout=30)
        got = (await client.get("/v1/org/retention", headers=auth(keys["a", "viewer"])))
        assert got.status_code == 200, got.text
        body = got.json()
        assert body["policy"]["trash_days"] == 30
        assert body["next_run"] is not None
        assert body["due"]["trash_days"]["threads"] == 0
        put = await client.put("/v1/org/retention", headers=a, json={"trash_days": 5})
        assert put.status_code == 200 and put.json()["policy"]["trash_days"] == 5
        bad = await client.put("/v1/org/retention", headers=a, json={"trash_days": 0})
        assert (bad.status_code, bad.json()["code"]) == (422, "retention_out_of_bounds")
        viewer = await client.put("/v1/org/retention", headers=auth(keys["a", "viewer"]),
                                  json={"trash_days": 9})
        assert viewer.status_code == 403
        # b sees its own default policy, not a's.
        theirs = await client.get("/v1/org/retention", headers=auth(keys["b", "admin"]))
        assert theirs.json()["policy"]["trash_days"] == 30
        # Export: a thread in the trash is still exported; another org's is 404.
        assert (await client.delete(f"/v1/threads/{thread['id']}", headers=a)).status_code \
            == 200
        exported = await client.get(f"/v1/threads/{thread['id']}/export", headers=a)
        assert exported.status_code == 200, exported.text
        data = exported.json()
        assert data["format"] == "ator.thread-export/v1"
        assert data["thread"]["id"] == thread["id"] and data["thread"]["deleted_at"]
        assert "message" in [e["kind"] for e in data["events"]]
        assert len(data["turns"]) == 1 and len(data["model_calls"]) == 1
        other = await client.get(f"/v1/threads/{thread['id']}/export",
                                 headers=auth(keys["b", "admin"]))
        assert (other.status_code, other.json()["code"]) == (404, "not_found")
        assert (await client.get("/v1/org/purges", headers=a)).json() == {"data": []}


async def test_an_idle_threads_events_go_under_the_events_policy_and_its_money_stays(
        make_ator) -> None:
    async with make_ator(providers={"h": Honest()}) as ator:
        scope = Scope((await ator.create_org("idle")).id)
        setup = await ator.create_setup(scope, name="s", provider="h", model=MODEL)
        idle = await ator.create_thread(scope, setup.id)
        busy = await ator.create_thread(scope, setup.id)
        for thread in (idle, busy):
            await ator.ask(scope, thread.id, "hi", timeout=30)
            await _hang_off(ator, scope, thread.id)
        await ator.db.write(sa.text(
            "UPDATE events SET created_at = now() - interval '40 days' WHERE thread_id = :t"),
            {"t": idle.id})
        usage_before = await _usage(ator, scope)
        busy_before = await _rows_of(ator, [busy.id])
        retention = ator.service(Retention)
        await retention.set_policy(scope, {"events_days": 30})
        report = await retention.purge_now(scope)
        after = await _rows_of(ator, [idle.id])
        assert after["events"] == 0 and after["tool_results"] == 0
        assert after["turns"] == 1 and after["model_calls"] == 1 and after["threads"] == 1
        meta = (await ator.db.read(sa.text(
            "SELECT request_meta FROM model_calls WHERE thread_id = :t"), {"t": idle.id}))
        assert meta[0].request_meta == {}
        assert report.rows["events"] > 0
        assert await _rows_of(ator, [busy.id]) == busy_before
        assert await _usage(ator, scope) == usage_before
        assert "events" in {a.what for a in await retention.audit(scope)}
