"""ator.memo.ByIdentity: once per object and slot, never another object's value."""

from __future__ import annotations

from ator.memo import ByIdentity


class Spec:
    def __init__(self, name: str) -> None:
        self.name = name
        self.schema = {"type": "object"}  # unhashable, like a tool's

    # Equal by name, so a cache keyed by value would take one for the other.
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Spec) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


def test_computed_once_per_object_and_slot_and_bounded() -> None:
    calls: list[str] = []
    memo: ByIdentity[Spec, str] = ByIdentity(2)

    def make(s: Spec) -> str:
        calls.append(s.name)
        return s.name.upper()

    a, b, c = Spec("a"), Spec("b"), Spec("c")
    assert [memo.get(a, make), memo.get(a, make), memo.get(a, make, "other")] == ["A"] * 3
    assert calls == ["a", "a"]  # once per slot
    memo.get(b, make)
    memo.get(c, make)  # past the size: the least recently used (a's) go
    assert memo.get(a, make) == "A" and calls.count("a") == 3


def test_an_object_equal_to_a_remembered_one_is_not_taken_for_it() -> None:
    memo: ByIdentity[Spec, str] = ByIdentity(8)
    first = Spec("x")
    assert memo.get(first, lambda s: "first") == "first"
    other = Spec("x")
    assert other == first
    assert memo.get(other, lambda s: "second") == "second"
    assert memo.get(first, lambda s: "again") == "first"


def test_of_all_is_once_per_the_same_members_in_the_same_order() -> None:
    calls: list[tuple[str, ...]] = []
    memo: ByIdentity[Spec, str] = ByIdentity(8)

    def make(specs: tuple[Spec, ...]) -> str:
        calls.append(tuple(s.name for s in specs))
        return "+".join(s.name for s in specs)

    a, b = Spec("a"), Spec("b")
    assert memo.of_all([a, b], make) == "a+b"
    assert memo.of_all([a, b], make) == "a+b"  # a new list of the same objects
    assert calls == [("a", "b")]
    assert memo.of_all([b, a], make) == "b+a"  # another order is another sequence
    assert memo.of_all([a, Spec("b")], make) == "a+b" and len(calls) == 3  # equal, not same
    assert memo.of_all([], make) == "" and memo.of_all([a], make, "slot") == "a"
    assert len(calls) == 5
