"""A message to an idle thread is one statement: its mailbox insert is its turn's start
(engine/actor.py `post`, store/turns.py `post_turn`), on real PostgreSQL. The mailbox's
guarantees hold: a resend runs nothing, nothing is ever accepted but not taken (one statement,
so a failure leaves nothing behind), and what arrives while the lease is held elsewhere waits
in the mailbox and becomes one next turn."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest
import sqlalchemy as sa

from ator.engine.actor import lease_key
from ator.errors import Conflict, NotFound
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.store.scope import Scope
from tests.conftest import ended, new_thread, quiet_reaper, wait_for_event
from tests.test_actor import GatedProvider


async def _pending(ator, thread_id: uuid.UUID) -> list[str]:  # type: ignore[no-untyped-def]
    rows = await ator.db.read(sa.text(
        "SELECT client_message_id FROM mailbox WHERE thread_id = :t AND turn_id IS NULL"
        " ORDER BY created_at"), {"t": thread_id})
    return [r.client_message_id for r in rows]


async def test_a_message_to_an_idle_thread_is_taken_by_the_statement_that_inserts_it(
    make_ator,
) -> None:
    provider = GatedProvider()  # the turn waits at its model call: the window is the post
    # The reaper and the heartbeat share the statement counter: keep them out of the window.
    async with make_ator(providers={"gated": provider, "s": ScriptedProvider([])},
                         lease_ttl=60.0) as ator:
        await quiet_reaper(ator)
        warm_scope, warm = await new_thread(ator, "s")  # first-connection queries
        await ator.ask(warm_scope, warm.id, "warm up", timeout=30)
        # The warm-up's actor drains its mailbox once more and lets its lease go after the
        # turn ended (a write of its own): under load that can land in the window.
        while await ator.busy(warm.id):  # noqa: ASYNC110 (the actor announces nothing)
            await asyncio.sleep(0.01)
        scope, thread = await new_thread(ator, "gated")
        before = ator.db.stats.snapshot()
        item, created = await ator.submit(scope, thread.id, "hello", client_message_id="m-1")
        after = ator.db.stats.snapshot()
        # One commit (the turn may have gone on to read before its model call); when
        # submit returns, the item is already a turn's.
        assert after[1] - before[1] == 1
        assert created and item.turn_id is not None
        assert await _pending(ator, thread.id) == []
        provider.gate.set()
        end = await wait_for_event(ator, scope, thread.id, ended)
        assert end.turn_id == item.turn_id and end.data["stop_reason"] == "end_turn"
        messages = [e for e in await ator.events(scope, thread.id) if e.kind == "message"]
        assert [(m.data["client_message_id"], m.data["mailbox_id"]) for m in messages] == [
            ("m-1", str(item.id))]


async def test_a_resend_to_the_idle_thread_runs_nothing_and_a_changed_one_is_refused(
    make_ator,
) -> None:
    provider = ScriptedProvider([ScriptStep(text="once")])
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s")
        first, _ = await ator.submit(scope, thread.id, "hello", client_message_id="m-1")
        await wait_for_event(ator, scope, thread.id, ended)
        again, created = await ator.submit(scope, thread.id, "hello", client_message_id="m-1")
        assert not created and again.id == first.id and again.turn_id == first.turn_id
        with pytest.raises(Conflict) as refused:
            await ator.submit(scope, thread.id, "something else", client_message_id="m-1")
        assert refused.value.code == "idempotency_conflict"
        assert len(await ator.turns(scope, thread.id)) == 1
        assert await _pending(ator, thread.id) == []


async def test_what_arrives_while_the_lease_is_held_elsewhere_waits_for_one_next_turn(
    make_ator,
) -> None:
    provider = ScriptedProvider([ScriptStep(text="both")])
    async with make_ator(providers={"s": provider}, reaper_interval=3600) as ator:
        scope, thread = await new_thread(ator, "s")
        # Another replica runs the thread's turn: its lease is held under another token.
        key = lease_key(thread.id)
        assert await ator.coord.acquire(key, "elsewhere:1", 60)
        one, created_one = await ator.submit(scope, thread.id, "one")
        two, created_two = await ator.submit(scope, thread.id, "two")
        assert created_one and created_two and one.turn_id is None and two.turn_id is None
        assert await _pending(ator, thread.id) == [one.client_message_id,
                                                   two.client_message_id]
        assert await ator.turns(scope, thread.id) == []
        # That replica's release sees the submits' mark: the thread runs (a wake without
        # force finds work only through the mark).
        assert await ator.coord.release(key, "elsewhere:1")
        ator.actor.wake(scope, thread.id)
        end = await wait_for_event(ator, scope, thread.id, ended)
        turns = await ator.turns(scope, thread.id)
        assert len(turns) == 1 and end.turn_id == turns[0].id
        taken = [e.data["client_message_id"] for e in await ator.events(scope, thread.id)
                 if e.kind == "message"]
        assert taken == [one.client_message_id, two.client_message_id]


async def test_a_failed_post_leaves_nothing_behind_and_its_resend_runs_once(make_ator) -> None:
    """The insert and the turn's start are one statement: when a later part of it fails (here
    a real unique violation on the event log), the insert is rolled back with it."""
    provider = ScriptedProvider([ScriptStep(text="first"), ScriptStep(text="second")])
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s")
        await ator.submit(scope, thread.id, "warm", client_message_id="m-0")
        await wait_for_event(ator, scope, thread.id, ended)
        # The next event's seq collides with one already written.
        await ator.db.write(sa.text(
            "UPDATE threads SET last_seq = last_seq - 1 WHERE id = :t"), {"t": thread.id})
        with pytest.raises(asyncpg.UniqueViolationError):
            await ator.submit(scope, thread.id, "lost?", client_message_id="m-1")
        rows = await ator.db.read(sa.text(
            "SELECT count(*) AS n FROM mailbox WHERE thread_id = :t AND client_message_id = 'm-1'"),
            {"t": thread.id})
        assert rows[0].n == 0
        assert len(await ator.turns(scope, thread.id)) == 1
        await ator.db.write(sa.text(
            "UPDATE threads SET last_seq = last_seq + 1 WHERE id = :t"), {"t": thread.id})
        item, created = await ator.submit(scope, thread.id, "lost?", client_message_id="m-1")
        assert created and item.turn_id is not None
        end = await wait_for_event(ator, scope, thread.id,
                                   lambda e: ended(e) and e.turn_id == item.turn_id)
        assert end.data["stop_reason"] == "end_turn"
        assert len(await ator.turns(scope, thread.id)) == 2


async def test_a_post_to_another_orgs_or_a_trashed_thread_is_not_found_and_stores_nothing(
    make_ator,
) -> None:
    provider = ScriptedProvider([ScriptStep(text="no")])
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s")
        other = Scope((await ator.create_org("other")).id)
        with pytest.raises(NotFound):
            await ator.submit(other, thread.id, "hi")
        await ator.delete_thread(scope, thread.id)
        with pytest.raises(NotFound):
            await ator.submit(scope, thread.id, "hi")
        rows = await ator.db.read(sa.text("SELECT count(*) AS n FROM mailbox WHERE thread_id = :t"),
                                  {"t": thread.id})
        assert rows[0].n == 0
        assert ator.actor.admission.in_flight == 0
        assert await ator.coord.holder(lease_key(thread.id)) is None
