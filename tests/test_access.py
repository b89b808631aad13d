"""Authentication is read-mostly: no write per request, a revoked key stops at once on the
replica that revoked it, and last_used_at still moves (at most once a minute)."""

from __future__ import annotations

import sqlalchemy as sa

from ator import Scope
from ator.engine.access import Access
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
