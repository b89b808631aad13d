"""Posts to idle threads that start at once share a statement (store/turns.py `post_turns`,
engine/starts.py `StartBatcher`), on real PostgreSQL. Each thread's start is what its own
`post_turn` would have been: its items, its history, its seqs, its outcome (item, None for a
resend, NotFound for another org's thread); a value the database refuses fails only its own
post; a poster gone before its batch was written starts nothing."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa

from ator.engine.starts import MAX_IN_FLIGHT, StartBatcher
from ator.errors import NotFound, ValidationFailed
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.store import mailbox as mailbox_store
from ator.store import turns as turn_store
from ator.store.mailbox import Post
from ator.store.scope import Scope
from tests.conftest import ended, new_thread, quiet_reaper, wait_for_event
from tests.test_actor import GatedProvider


def _post(scope: Scope, cmid: str, text: str = "hello") -> Post:
    return Post.message(scope, cmid, text)


async def _rows(ator, sql: str, **params):  # type: ignore[no-untyped-def]
    return await ator.db.read(sa.text(sql), params)


async def test_one_statement_starts_many_threads_each_as_its_own_post_turn(make_ator) -> None:
    async with make_ator(providers={"s": ScriptedProvider([ScriptStep(text="hi")])},
                         engine=False) as ator:
        scope, a = await new_thread(ator, "s")
        b = await ator.create_thread(scope, a.setup_id)
        resent = await ator.create_thread(scope, a.setup_id)
        trashed = await ator.create_thread(scope, a.setup_id)
        other_scope, foreign = await new_thread(ator, "s")
        # a: an item already pending, taken with the post; resent: its client id was used.
        await mailbox_store.submit(ator.db, scope, a.id, client_message_id="a-0",
                                   kind="message", content={"role": "user", "content": []})
        await mailbox_store.submit(ator.db, scope, resent.id, client_message_id="r-1",
                                   kind="message", content={"role": "user", "content": []})
        await ator.db.write(sa.text("UPDATE mailbox SET turn_id = gen_random_uuid() "
                                    "WHERE thread_id = :t"), {"t": resent.id})
        await ator.delete_thread(scope, trashed.id)
        entries = [
            turn_store.Starting(scope, a.id, uuid.uuid4(), _post(scope, "a-1")),
            turn_store.Starting(scope, b.id, uuid.uuid4(), _post(scope, "b-1")),
            turn_store.Starting(scope, foreign.id, uuid.uuid4(), _post(scope, "f-1")),
            turn_store.Starting(scope, resent.id, uuid.uuid4(), _post(scope, "r-1")),
            turn_store.Starting(scope, trashed.id, uuid.uuid4(), _post(scope, "t-1")),
        ]
        before = ator.db.stats.snapshot()
        got = await turn_store.post_turns(ator.db, entries, owner="me")
        assert ator.db.stats.snapshot() == (before[0] + 1, before[1] + 1)

        start_a, events_a, item_a = got[0]  # type: ignore[misc]
        assert start_a.thread_id == a.id and item_a is not None
        assert item_a.turn_id == entries[0].turn_id
        assert [(e.kind, e.data.get("client_message_id")) for e in events_a] == [
            ("turn_started", None), ("message", "a-0"), ("message", "a-1")]
        assert [e.seq for e in events_a] == [1, 2, 3]
        assert {e.turn_id for e in events_a} == {entries[0].turn_id}

        start_b, events_b, item_b = got[1]  # type: ignore[misc]
        assert start_b.thread_id == b.id and item_b is not None
        assert [(e.seq, e.kind) for e in events_b] == [(1, "turn_started"), (2, "message")]
        assert events_b[1].data["mailbox_id"] == str(item_b.id)

        assert isinstance(got[2], NotFound)  # another org's thread, asked in this org's scope
        _start, events_r, item_r = got[3]  # type: ignore[misc]
        assert item_r is None and events_r == []  # a resend with nothing pending: no turn
        start_t, events_t, item_t = got[4]  # type: ignore[misc]
        assert start_t.deleted and item_t is None and events_t == []

        turns = await _rows(ator, "SELECT thread_id, id, owner FROM turns WHERE thread_id = "
                            "ANY(:ids)", ids=[a.id, b.id, foreign.id, resent.id, trashed.id])
        assert {(r.thread_id, r.id, r.owner) for r in turns} == {
            (a.id, entries[0].turn_id, "me"), (b.id, entries[1].turn_id, "me")}
        seqs = await _rows(ator, "SELECT id, last_seq FROM threads WHERE id = ANY(:ids)",
                           ids=[a.id, b.id, foreign.id, resent.id, trashed.id])
        assert {r.id: r.last_seq for r in seqs} == {
            a.id: 3, b.id: 2, foreign.id: 0, resent.id: 0, trashed.id: 0}
        stored = await _rows(ator, "SELECT client_message_id FROM mailbox WHERE thread_id = "
                             "ANY(:ids) ORDER BY 1", ids=[foreign.id, trashed.id])
        assert stored == []
        assert other_scope != scope


@contextlib.asynccontextmanager
async def _slots_held(ator, thread_ids: list[uuid.UUID]) -> AsyncIterator[None]:  # type: ignore[no-untyped-def]
    """Row locks on the threads whose starts take the batcher's free slots: those starts
    wait in PostgreSQL (on the lock) until the block ends, so what is posted meanwhile
    queues for one batch."""
    async with ator.db.pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT 1 FROM threads WHERE id = ANY($1::uuid[]) FOR UPDATE",
                           thread_ids)
        yield


async def _waiting_on_locks(ator, n: int) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(30):
        while True:
            rows = await _rows(ator, "SELECT count(*) AS n FROM pg_stat_activity "
                               "WHERE wait_event_type = 'Lock' AND datname = current_database()")
            if rows[0].n >= n:
                return
            await asyncio.sleep(0.01)


async def _threads(ator, n: int) -> tuple[Scope, list[uuid.UUID]]:  # type: ignore[no-untyped-def]
    scope, first = await new_thread(ator, "s")
    rest = [(await ator.create_thread(scope, first.setup_id)).id for _ in range(n - 1)]
    return scope, [first.id, *rest]


async def test_starts_that_arrive_while_the_slots_are_busy_go_out_in_one_statement(
    make_ator,
) -> None:
    async with make_ator(providers={"s": ScriptedProvider([])}, engine=False) as ator:
        scope, threads = await _threads(ator, MAX_IN_FLIGHT + 5)
        batcher = StartBatcher(ator.db, owner="me")
        busy, queued = threads[:MAX_IN_FLIGHT], threads[MAX_IN_FLIGHT:]

        def start(thread_id: uuid.UUID) -> asyncio.Task[turn_store.Started]:
            return asyncio.create_task(batcher.post(turn_store.Starting(
                scope, thread_id, uuid.uuid4(), _post(scope, f"m-{thread_id}"))))

        before = ator.db.stats.snapshot()
        async with _slots_held(ator, busy):
            first = [start(t) for t in busy]
            await _waiting_on_locks(ator, MAX_IN_FLIGHT)
            later = [start(t) for t in queued]
            await asyncio.sleep(0)  # each queues on its first step
            assert not any(t.done() for t in later)
        results = await asyncio.gather(*first, *later)
        # One commit per busy slot, then one for the five that queued meanwhile.
        assert ator.db.stats.snapshot()[1] - before[1] == MAX_IN_FLIGHT + 1
        for thread_id, (start_, events, item) in zip(threads, results, strict=True):
            assert start_.thread_id == thread_id and item is not None
            assert [e.kind for e in events] == ["turn_started", "message"]
            assert events[1].data["client_message_id"] == f"m-{thread_id}"
        rows = await _rows(ator, "SELECT count(*) AS n FROM turns WHERE thread_id = ANY(:ids)",
                           ids=threads)
        assert rows[0].n == len(threads)


async def test_a_value_the_database_refuses_fails_only_its_own_post(make_ator) -> None:
    async with make_ator(providers={"s": ScriptedProvider([])}, engine=False) as ator:
        scope, threads = await _threads(ator, MAX_IN_FLIGHT + 3)
        batcher = StartBatcher(ator.db, owner="me")
        busy, queued = threads[:MAX_IN_FLIGHT], threads[MAX_IN_FLIGHT:]
        texts = {queued[0]: "fine", queued[1]: "a NUL \x00 here", queued[2]: "fine too"}

        def start(thread_id: uuid.UUID, text: str = "hi") -> asyncio.Task[turn_store.Started]:
            return asyncio.create_task(batcher.post(turn_store.Starting(
                scope, thread_id, uuid.uuid4(), _post(scope, "m-1", text))))

        async with _slots_held(ator, busy):
            first = [start(t) for t in busy]
            await _waiting_on_locks(ator, MAX_IN_FLIGHT)
            later = [start(t, texts[t]) for t in queued]
            await asyncio.sleep(0)
        await asyncio.gather(*first)
        good, bad, good_too = await asyncio.gather(*later, return_exceptions=True)
        assert isinstance(bad, ValidationFailed) and bad.code == "invalid_value"
        assert good[2] is not None and good_too[2] is not None  # type: ignore[index]
        rows = await _rows(ator, "SELECT thread_id FROM mailbox WHERE thread_id = ANY(:ids)",
                           ids=queued)
        assert sorted(r.thread_id for r in rows) == sorted([queued[0], queued[2]])
        turns = await _rows(ator, "SELECT thread_id FROM turns WHERE thread_id = ANY(:ids)",
                            ids=queued)
        assert sorted(r.thread_id for r in turns) == sorted([queued[0], queued[2]])


async def test_a_poster_gone_before_its_batch_was_written_starts_nothing(make_ator) -> None:
    async with make_ator(providers={"s": ScriptedProvider([])}, engine=False) as ator:
        scope, threads = await _threads(ator, MAX_IN_FLIGHT + 2)
        batcher = StartBatcher(ator.db, owner="me")
        busy, (gone, kept) = threads[:MAX_IN_FLIGHT], threads[MAX_IN_FLIGHT:]

        def start(thread_id: uuid.UUID) -> asyncio.Task[turn_store.Started]:
            return asyncio.create_task(batcher.post(turn_store.Starting(
                scope, thread_id, uuid.uuid4(), _post(scope, "m-1"))))

        async with _slots_held(ator, busy):
            first = [start(t) for t in busy]
            await _waiting_on_locks(ator, MAX_IN_FLIGHT)
            cancelled, waiting = start(gone), start(kept)
            await asyncio.sleep(0)
            cancelled.cancel()
            with pytest.raises(asyncio.CancelledError):
                await cancelled
        await asyncio.gather(*first)
        assert (await waiting)[2] is not None
        rows = await _rows(ator, "SELECT thread_id FROM mailbox WHERE thread_id = ANY(:ids)",
                           ids=[gone, kept])
        assert [r.thread_id for r in rows] == [kept]


class _AllGated(GatedProvider):
    """Every call waits for the gate: no turn writes its end while the burst is counted."""

    async def stream(self, request):  # type: ignore[no-untyped-def,override]
        await self.gate.wait()
        async for event in super().stream(request):
            yield event


async def test_a_burst_of_posts_to_idle_threads_runs_each_once_in_fewer_commits(
    make_ator,
) -> None:
    """Through the actor: forty users post at once; every post is taken by its own turn,
    each turn runs once, and the starts took fewer commits than there were posts."""
    provider = _AllGated()
    provider.gate.set()  # the warm-up answers at once
    async with make_ator(providers={"gated": provider}, lease_ttl=60.0) as ator:
        await quiet_reaper(ator)
        scope, warm = await new_thread(ator, "gated")
        await ator.ask(scope, warm.id, "warm up", timeout=30)  # the pool's first queries
        while await ator.busy(warm.id):  # noqa: ASYNC110 (the actor announces nothing)
            await asyncio.sleep(0.01)
        provider.gate.clear()
        ids = [(await ator.create_thread(scope, warm.setup_id)).id for _ in range(40)]
        before = ator.db.stats.snapshot()
        posted = await asyncio.gather(*(
            ator.submit(scope, t, f"hello {i}", client_message_id=f"m-{i}")
            for i, t in enumerate(ids)))
        commits = ator.db.stats.snapshot()[1] - before[1]
        assert all(created and item.turn_id is not None for item, created in posted)
        assert commits < len(ids)
        provider.gate.set()
        for (item, _created), thread_id in zip(posted, ids, strict=True):
            end = await wait_for_event(ator, scope, thread_id, ended)
            assert end.turn_id == item.turn_id and end.data["stop_reason"] == "end_turn"
        turns = await _rows(ator, "SELECT thread_id, count(*) AS n FROM turns "
                            "WHERE thread_id = ANY(:ids) GROUP BY thread_id", ids=ids)
        assert sorted(r.n for r in turns) == [1] * len(ids)
