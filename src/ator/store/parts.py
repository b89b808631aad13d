"""Typed parts of a turn's step statement, and the one place that composes them (layer:
store; imports sqlalchemy).

A step write (store.turns.write_step) is one statement: the turn's own `UPDATE turns … AS
_turn`, the events' append, and whatever parts a feature adds — a billed model call, a
reservation's release, the turn's end, a subagent's result. A part is a value: its `sql` is
a `PartSql` (constant per shape of part: a module-level value, never built per call) and its
`values()` are its own parameters. Composition is checked, not trusted:

- a part's parameters are its own: `compose` renames each declared name to one unique to
  the part (`:released` of one part never meets another's `:released`), and refuses a
  placeholder that is neither declared nor one of the statement's own (`SHARED`);
- a CTE or select name used twice is refused (two parts writing `_usage` would silently
  shadow each other);
- the statement cache is keyed on the parts' SQL values themselves, so two parts that look
  alike (the same `name`) but differ in SQL never share a statement.

The composed statement and the renaming of each part's parameters are computed once per
shape; a write then only copies its parts' values under their composed names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import sqlalchemy as sa

__all__ = ["SHARED", "Composed", "PartSql", "StepPart", "compose"]

#: The statement's own parameters, which every part may read (and none may declare).
SHARED: Final = frozenset({"org_id", "thread_id", "turn_id", "steps", "ev_kinds", "ev_datas"})

# A bind placeholder as SQLAlchemy's text() sees one (not a `::cast`, not an escaped colon).
_BIND = re.compile(r"(?<![:\w\\]):(\w+)(?![:\w])")
_CTE_NAME = re.compile(r"^\s*(\w+)\s+AS\s*\(", re.IGNORECASE)
_SELECT_NAME = re.compile(r"\bAS\s+(\w+)\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class PartSql:
    """The SQL of one shape of part. `turn_set` is appended to the turn's SET list (starting
    with ", "); `ctes` are WITH-items `name AS (…)` (they may read `_turn`, which has a row
    only while the turn is still running); `selects` are `expr AS name` columns returned in
    `StepWrite.extra`; `params` are the part's own parameter names."""

    name: str
    turn_set: str = ""
    ctes: tuple[str, ...] = ()
    selects: tuple[str, ...] = ()
    params: frozenset[str] = frozenset()


class StepPart(Protocol):
    """One piece of a step's statement: how a feature adds to a step write (a claim, a
    reservation's release) without a flag on a shared function."""

    @property
    def sql(self) -> PartSql: ...

    def values(self) -> dict[str, Any]:
        """The part's own parameters, by the names its `sql.params` declares."""
        ...


@dataclass(frozen=True, slots=True)
class Composed:
    statement: sa.TextClause
    names: tuple[dict[str, str], ...]  # per part: its own name -> the composed name

    def params(self, parts: Sequence[StepPart], into: dict[str, Any]) -> dict[str, Any]:
        """`into` with every part's values under their composed names."""
        for part, names in zip(parts, self.names, strict=True):
            for name, value in part.values().items():
                into[names[name]] = value
        return into


_composed: dict[tuple[PartSql, ...], Composed] = {}


def compose(shapes: tuple[PartSql, ...], build: Callable[[str, list[str], list[str]], str]
            ) -> Composed:
    """The statement of these part shapes (cached by their SQL). `build(turn_set, ctes,
    selects)` writes the statement around the parts' composed fragments. Raises ValueError
    for a part that uses an undeclared parameter or reuses a CTE or select name."""
    found = _composed.get(shapes)
    if found is not None:
        return found
    turn_set = ""
    ctes: list[str] = []
    selects: list[str] = []
    names: list[dict[str, str]] = []
    seen_ctes: set[str] = {"_turn", "_seq", "_ev"}
    seen_selects: set[str] = {"live", "events"}
    for i, shape in enumerate(shapes):
        if shape.params & SHARED:
            raise ValueError(f"step part {shape.name!r} declares shared parameters "
                             f"{sorted(shape.params & SHARED)}")
        mine = {p: f"p{i}_{p}" for p in sorted(shape.params)}

        def rename(sql: str, shape: PartSql = shape, mine: dict[str, str] = mine) -> str:
            def one(m: re.Match[str]) -> str:
                name = m.group(1)
                if name in mine:
                    return ":" + mine[name]
                if name in SHARED:
                    return m.group(0)
                raise ValueError(f"step part {shape.name!r} uses :{name}, which it does not "
                                 "declare")
            return _BIND.sub(one, sql)

        turn_set += rename(shape.turn_set)
        ctes += map(rename, _claim(shape, shape.ctes, seen_ctes, "CTE name"))
        selects += map(rename, _claim(shape, shape.selects, seen_selects, "column"))
        names.append(mine)
    found = _composed[shapes] = Composed(sa.text(build(turn_set, ctes, selects)),
                                         tuple(names))
    return found


def _claim(shape: PartSql, items: tuple[str, ...], seen: set[str], what: str
           ) -> tuple[str, ...]:
    """`items` (CTEs or select columns) once their names are known to be new in `seen`."""
    pattern = _CTE_NAME.match if what == "CTE name" else _SELECT_NAME.search
    for item in items:
        match = pattern(item)
        if match is None:
            raise ValueError(f"step part {shape.name!r} has a {what} missing in {item[:40]!r}")
        if match.group(1) in seen:
            raise ValueError(f"step part {shape.name!r} reuses the {what} {match.group(1)}")
        seen.add(match.group(1))
    return items
