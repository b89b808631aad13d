"""Authentication is read-mostly: no write per request, a revoked key stops at once on the
replica that revoked it, and last_used_at still moves (at most once a minute)."""

from __future__ import annotations

import asyncio

import sqlalchemy as sa

from ator import Scope
from ator.engine.access import Access
from ator.store import keys as key_store
from ator.store.schema import api_keys


async def test_authenticating_many_times_writes_last_used_at_once(make_ator) -> None:
    async with make_ator() as ator:
        org = await ator.create_org("keys")
        access = ator.service(Access)
        record, key = await access.issue_key(Scope(org.id), email="a@x.io", role="member",
                                             name="k")
        first = await ator.service(Access).authenticate(key)
        assert first is not None and first.key_id == record.id
        [row] = await ator.db.read(sa.select(api_keys.c.last_used_at)
                                   .where(api_keys.c.id == record.id))
        assert row.last_used_at is not None  # the first use is recorded
        for _ in range(49):
            assert await ator.service(Access).authenticate(key) == first
        # No later request wrote the row again (each write would move now()).
        [again] = await ator.db.read(sa.select(api_keys.c.last_used_at)
                                     .where(api_keys.c.id == record.id))
        assert again.last_used_at == row.last_used_at


async def test_a_revoked_key_is_refused_at_once_on_the_revoking_replica(make_ator) -> None:
    async with make_ator() as ator:
        org = await ator.create_org("revoke")
        scope = Scope(org.id)
        record, key = await ator.service(Access).issue_key(scope, email="b@x.io", role="admin",
                                                  name="k")
        assert await ator.service(Access).authenticate(key) is not None  # now cached
        await ator.service(Access).revoke_key(scope, record.id)
        assert await ator.service(Access).authenticate(key) is None
        assert await ator.service(Access).authenticate("ator_deadbeef_not-a-key") is None


async def test_a_burst_that_misses_the_cache_reads_the_key_once(make_ator, monkeypatch) -> None:
    """A thousand POSTs with one key arrive just after its cached entry went stale: they
    share one lookup (and one last_used_at write) instead of each reading the database.

    The reads are counted at the key store, not on the database's shared statement counter:
    the runtime's own background work (the lease heartbeat, the reaper) may run a statement
    in the same window on a loaded machine."""
    calls: list[str] = []
    for name in ("key_principal", "touch_key"):
        real = getattr(key_store, name)

        def counted(*args, _real=real, _name=name, **kwargs):  # type: ignore[no-untyped-def]
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(key_store, name, counted)
    async with make_ator() as ator:
        org = await ator.create_org("burst")
        access = ator.service(Access)
        record, key = await access.issue_key(Scope(org.id), email="c@x.io", role="member",
                                             name="k")
        calls.clear()
        found = await asyncio.gather(*(access.authenticate(key) for _ in range(50)))
        assert {p.key_id for p in found if p is not None} == {record.id}
        assert None not in found
        # the lookup and the first use's touch, not 50 of each
        assert sorted(calls) == ["key_principal", "touch_key"]


async def test_a_lookup_that_read_before_a_revocation_is_not_cached_or_joined(
        make_ator, monkeypatch) -> None:
    async with make_ator() as ator:
        org = await ator.create_org("race")
        scope = Scope(org.id)
        access = ator.service(Access)
        record, key = await access.issue_key(scope, email="d@x.io", role="member", name="k")
        read, release = asyncio.Event(), asyncio.Event()
        real = key_store.key_principal

        async def slow(db, digest):  # type: ignore[no-untyped-def]
            found = await real(db, digest)
            read.set()
            await release.wait()
            return found

        monkeypatch.setattr(key_store, "key_principal", slow)
        early = asyncio.ensure_future(access.authenticate(key))
        await read.wait()  # it has read the key, still valid
        await access.revoke_key(scope, record.id)
        late = asyncio.ensure_future(access.authenticate(key))  # after the revocation
        await asyncio.sleep(0)
        release.set()
        assert (await early) is not None  # begun before the revocation: it was valid then
        assert (await late) is None  # not handed the early lookup's principal
        assert await access.authenticate(key) is None  # and that principal was not cached
