"""Making a thread (store.threads.create_thread, one INSERT … SELECT): only on a live setup
of the thread's own org, with what it was given, in the caller's transaction when asked."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from ator.errors import NotFound, ValidationFailed
from ator.store import threads as thread_store
from ator.store.scope import Scope


async def _org_with_setup(ator: Any, name: str) -> tuple[Scope, Any]:
    scope = Scope((await ator.create_org(f"{name}-{uuid.uuid4().hex[:6]}")).id)
    return scope, await ator.create_setup(scope, name="s", provider="scripted", model="m")


async def test_a_thread_is_made_only_on_a_live_setup_of_its_own_org(make_ator: Any) -> None:
    async with make_ator() as ator:
        mine, setup = await _org_with_setup(ator, "mine")
        theirs, their_setup = await _org_with_setup(ator, "theirs")
        for scope, setup_id in [(mine, their_setup.id), (theirs, setup.id),
                                (mine, uuid.uuid4())]:
            with pytest.raises(ValidationFailed) as refused:
                await thread_store.create_thread(ator.db, scope, setup_id, title="no")
            assert refused.value.code == "invalid_setup"
        await ator.archive_setup(theirs, their_setup.id)
        with pytest.raises(ValidationFailed) as archived:
            await thread_store.create_thread(ator.db, theirs, their_setup.id)
        assert archived.value.code == "invalid_setup"
        assert await ator.threads(mine) == [] and await ator.threads(theirs) == []


async def test_a_thread_keeps_what_it_was_given_and_a_child_its_place_in_the_tree(
    make_ator: Any,
) -> None:
    async with make_ator() as ator:
        scope, setup = await _org_with_setup(ator, "tree")
        meta = {"customer": "acme", "tags": ["a", "b"], "n": 3, "nested": {"ok": True}}
        root = await thread_store.create_thread(ator.db, scope, setup.id, title="Root",
                                                instructions="Be brief.", metadata=meta)
        assert (root.org_id, root.setup_id, root.title, root.instructions) == (
            scope.org_id, setup.id, "Root", "Be brief.")
        assert (root.parent_id, root.root_id, root.depth, root.last_seq) == (None, root.id, 0, 0)
        assert root.metadata == meta and root.deleted_at is None and not root.voice
        assert await ator.thread(scope, root.id) == root
        child = await thread_store.create_thread(ator.db, scope, setup.id, parent=root)
        grandchild = await thread_store.create_thread(ator.db, scope, setup.id, parent=child)
        assert (child.parent_id, child.root_id, child.depth) == (root.id, root.id, 1)
        assert (grandchild.parent_id, grandchild.root_id, grandchild.depth) == (
            child.id, root.id, 2)
        assert child.metadata == {} and child.title == ""


async def test_a_thread_made_in_a_transaction_that_rolls_back_is_not_there(
    make_ator: Any,
) -> None:
    async with make_ator() as ator:
        scope, setup = await _org_with_setup(ator, "tx")
        made: list[Any] = []
        with pytest.raises(RuntimeError):
            async with ator.db.begin() as conn:
                made.append(await thread_store.create_thread(ator.db, scope, setup.id,
                                                             title="gone", within=conn))
                raise RuntimeError("roll back")
        with pytest.raises(NotFound):
            await ator.thread(scope, made[0].id)
        async with ator.db.begin() as conn:
            kept = await thread_store.create_thread(ator.db, scope, setup.id, within=conn)
        assert (await ator.thread(scope, kept.id)).id == kept.id
