"""Core statements are compiled once per shape (store/database.py): a statement built again
with other values reuses the compile and runs with its own values, against a real PostgreSQL,
including an IN list of another length, an empty one and a many-row insert."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable

import pytest
import sqlalchemy as sa

from ator.settings import Settings
from ator.store.database import _DIALECT, Database, open_database

_items = sa.table("compile_cache_items", sa.column("id", sa.Uuid), sa.column("label", sa.Text),
                  sa.column("n", sa.Integer))


@pytest.fixture
async def db(settings_factory: Callable[..., Settings]) -> AsyncIterator[Database]:
    database = await open_database(settings_factory())
    await database.write(sa.text(
        "CREATE TABLE IF NOT EXISTS compile_cache_items (id uuid PRIMARY KEY, label text,"
        " n int)"))
    yield database
    await database.write(sa.text("DROP TABLE IF EXISTS compile_cache_items"))
    await database.close()


def fresh(stmt: sa.Executable, params: dict[str, object] | None = None
          ) -> tuple[str, list[object]]:
    """What the statement compiles to on its own, with nothing cached."""
    compiled = stmt.compile(dialect=_DIALECT,  # type: ignore[attr-defined]
                            compile_kwargs={"render_postcompile": True})
    values = compiled.construct_params(params)
    return compiled.string, [values[n] for n in compiled.positiontup or ()]


async def test_the_same_shape_with_other_values_runs_with_its_own_values(db: Database) -> None:
    ids = [uuid.uuid4() for _ in range(6)]
    for i, item in enumerate(ids):  # one shape, six sets of values
        await db.write(sa.insert(_items).values(id=item, label=f"item {i}", n=i))
    assert len(db._core) == 1
    for i, item in enumerate(ids):
        rows = await db.read(sa.select(_items.c.label, _items.c.n).where(_items.c.id == item))
        assert [(r.label, r.n) for r in rows] == [(f"item {i}", i)]


async def test_in_lists_of_any_length_share_a_compile_and_bind_their_own_items(
        db: Database) -> None:
    ids = [uuid.uuid4() for _ in range(5)]
    await db.write(sa.insert(_items).values([{"id": i, "label": "x", "n": k}
                                             for k, i in enumerate(ids)]))
    for chosen in (ids[:3], ids[3:], [ids[1]], []):
        stmt = sa.select(_items.c.n).where(_items.c.id.in_(chosen)).order_by(_items.c.n)
        assert db.compile(stmt) == fresh(stmt)
        rows = await db.read(stmt)
        assert [r.n for r in rows] == sorted(ids.index(i) for i in chosen)


async def test_a_bound_parameter_given_at_run_time_is_not_taken_from_the_first_call(
        db: Database) -> None:
    item = uuid.uuid4()
    await db.write(sa.insert(_items).values(id=item, label="before", n=0))
    stmt = (sa.update(_items).where(_items.c.id == sa.bindparam("item"))
            .values(label=sa.bindparam("label")).returning(_items.c.label))
    for label in ("first", "second"):
        assert db.compile(stmt, {"item": item, "label": label}) == fresh(
            stmt, {"item": item, "label": label})
        rows = await db.write(stmt, {"item": item, "label": label})
        assert [r.label for r in rows] == [label]


async def test_the_cache_keeps_a_bounded_number_of_shapes(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ator.store.database._CORE_SHAPES", 3)
    for width in range(1, 8):  # seven shapes: a select of 1..7 columns
        cols = [_items.c.n.label(f"c{k}") for k in range(width)]
        await db.read(sa.select(*cols).where(_items.c.n == width))
    assert len(db._core) == 3
