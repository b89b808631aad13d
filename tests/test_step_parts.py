"""Step parts are typed values composed without name clashes, and the statement cache is
keyed on the parts' SQL, not on a name they carry (store.parts). The composed statement runs
on real PostgreSQL."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from ator.store import turns as turn_store
from ator.store.parts import PartSql, compose
from ator.store.turns import _step_sql
from tests.conftest import new_thread


def _select(column: str) -> PartSql:
    return PartSql("same-name", selects=(f"CAST(:n AS int) AS {column}",),
                   params=frozenset({"n"}))


A, B = _select("a"), _select("b")


@dataclass(frozen=True, slots=True)
class Picks:
    """A part that returns its own `:n` under a column name of its shape."""

    shape: PartSql
    n: int

    @property
    def sql(self) -> PartSql:
        return self.shape

    def values(self) -> dict[str, Any]:
        return {"n": self.n}


def test_each_part_keeps_its_own_parameters_and_the_cache_keys_on_sql() -> None:
    both = compose((A, B), _step_sql)
    text = str(both.statement)
    assert "CAST(:p0_n AS int) AS a" in text and "CAST(:p1_n AS int) AS b" in text
    assert both.params([Picks(A, 1), Picks(B, 2)], {}) == {"p0_n": 1, "p1_n": 2}
    # Same name, different SQL: its own statement (a cache keyed on the name gave A's).
    assert "AS b" in str(compose((B,), _step_sql).statement)
    assert "AS a" in str(compose((A,), _step_sql).statement)
    assert compose((A, B), _step_sql) is both


def test_a_part_that_breaks_the_rules_is_refused_when_composed() -> None:
    with pytest.raises(ValueError, match="does not declare"):
        compose((PartSql("sloppy", selects=(":other AS x",)),), _step_sql)
    with pytest.raises(ValueError, match="reuses the column a"):
        compose((A, A), _step_sql)
    cte = PartSql("c", ctes=("_x AS (SELECT 1)",))
    with pytest.raises(ValueError, match="reuses the CTE name _x"):
        compose((cte, cte), _step_sql)
    with pytest.raises(ValueError, match="shared parameters"):
        compose((PartSql("s", params=frozenset({"org_id"})),), _step_sql)
    # `::casts` and shared names are not parameters of the part.
    ok = PartSql("ok", selects=("(now()::date = now()::date AND :turn_id IS NOT NULL) AS t",))
    assert "now()::date" in str(compose((ok,), _step_sql).statement)


async def test_two_parts_with_the_same_parameter_name_each_get_their_value(
    make_ator: Any,
) -> None:
    async with make_ator() as ator:
        scope, thread = await new_thread(ator, "scripted")
        # No turn runs: nothing is written (`live` False), but the statement runs whole.
        write = await turn_store.write_step(
            ator.db, scope, thread.id, uuid.uuid4(), [("note", {"text": "x"})], steps=1,
            parts=[Picks(A, 1), Picks(B, 2)])
        assert write.extra == {"a": 1, "b": 2}  # one shared namespace gave 2 and 2
        assert not write.live and write.events == []
