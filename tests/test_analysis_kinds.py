"""Analysis kinds and their validators, in code: every verdict (accept, clean, cut, reject,
unparseable), references against the input or the org's records, the hash key's parts, and
the spec checks that refuse a kind before it can run."""

from __future__ import annotations

from typing import Any

import pytest

import ator.analyses
from ator.analyses import (
    Length,
    Reference,
    Vocabulary,
    builtin_kinds,
    from_spec,
    input_hash,
    validate,
)
from ator.errors import ValidationFailed

SCHEMA: dict[str, Any] = {"type": "object"}


def test_the_package_exports_resolve() -> None:
    for name in ator.analyses.__all__:
        assert hasattr(ator.analyses, name), name


async def test_vocabulary_cleans_case_and_separators_or_rejects() -> None:
    v = [Vocabulary("tag", ("follow_up", "closed"), on_miss="reject")]
    got = await validate('{"tag": "Follow-Up"}', SCHEMA, v, input={})
    assert (got.verdict, got.output) == ("clean", {"tag": "follow_up"})
    got = await validate('{"tag": "open"}', SCHEMA, v, input={})
    assert got.verdict == "reject" and not got.usable


async def test_a_list_drops_values_outside_the_vocabulary() -> None:
    v = [Vocabulary("tags", ("a", "b"))]
    got = await validate('{"tags": ["a", "zz", "B"]}', SCHEMA, v, input={})
    assert (got.verdict, got.output) == ("clean", {"tags": ["a", "b"]})


async def test_lengths_cut_or_reject() -> None:
    got = await validate('{"s": "abcdef"}', SCHEMA, [Length("s", 3)], input={})
    assert (got.verdict, got.output) == ("cut", {"s": "abc"})
    got = await validate('{"s": "abcdef"}', SCHEMA, [Length("s", 3, on_over="reject")],
                         input={})
    assert got.verdict == "reject"


async def test_references_must_exist_in_the_input_or_the_org() -> None:
    within = [Reference("ids", within="known", on_miss="drop")]
    got = await validate('{"ids": ["1", "2"]}', SCHEMA, within, input={"known": ["1"]})
    assert (got.verdict, got.output) == ("clean", {"ids": ["1"]})

    async def exists(record: str, ids: list[str]) -> set[str]:
        assert record == "thread"
        return {"t1"} & set(ids)

    records = [Reference("thread", record="thread")]
    assert (await validate('{"thread": "t1"}', SCHEMA, records, input={},
                           exists=exists)).verdict == "accept"
    assert (await validate('{"thread": "t9"}', SCHEMA, records, input={},
                           exists=exists)).verdict == "reject"


async def test_the_strongest_verdict_wins_and_the_schema_has_the_last_word() -> None:
    schema = {"type": "object", "required": ["s", "k"],
              "properties": {"k": {"type": "integer"}}}
    v = [Vocabulary("t", ("x",)), Length("s", 2)]
    got = await validate('{"t": "X", "s": "long", "k": 1}', schema, v, input={})
    assert got.verdict == "cut" and len(got.problems) == 2
    got = await validate('{"t": "x", "s": "ok", "k": "one"}', schema, v, input={})
    assert got.verdict == "reject"


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '"a string"', "{broken"])
async def test_anything_but_one_json_object_is_unparseable(text: str) -> None:
    assert (await validate(text, SCHEMA, [], input={})).verdict == "unparseable"


def test_the_hash_depends_on_version_key_fields_and_documents_only() -> None:
    kind = builtin_kinds("scripted", "scripted")[0]
    from dataclasses import replace
    keyed = replace(kind, key_fields=("a",))
    base = input_hash(keyed, {"a": 1, "b": 2}, [])
    assert input_hash(keyed, {"a": 1, "b": 3}, []) == base
    assert input_hash(keyed, {"a": 2, "b": 2}, []) != base
    assert input_hash(replace(keyed, version=2), {"a": 1}, []) != base
    assert input_hash(keyed, {"a": 1}, [("doc-1", 2)]) != input_hash(
        keyed, {"a": 1}, [("doc-1", 3)])


GOOD: dict[str, Any] = {"output_schema": {"type": "object", "required": ["x"]},
                        "rule": {"output": {"x": 1}}}


@pytest.mark.parametrize("change", [
    {"output_schema": None},
    {"rule": {"output": {"y": 1}}},  # the rule's output misses the schema
    {"validators": [{"type": "vocabulary", "field": "x", "values": []}]},
    {"validators": [{"type": "reference", "field": "x"}]},
    {"apply": ["launch_missiles"]},
    {"at_limit": "overspend"},
    {"triggers": ["every_second"]},
    {"input": {"source": "thread", "last": 10_000}},
    {"model": {"max_tokens": True}},
    {"evals": [{"output": "{}", "expect": "maybe"}]},
])
def test_a_bad_spec_is_refused_before_it_can_run(change: dict[str, Any]) -> None:
    with pytest.raises(ValidationFailed) as err:
        from_spec("k", {**GOOD, **change})
    assert err.value.code == "invalid_kind"


def test_a_bad_name_is_refused() -> None:
    with pytest.raises(ValidationFailed):
        from_spec("Bad Name!", GOOD)


@pytest.mark.parametrize("change", [
    {"model": {"config": [1, 2]}},
    {"evals": [{"output": "{}", "expect": "accept", "input": [1]}]},
    {"output_schema": {"$ref": "https://example.com/schema.json"}},
    {"validators": [{"type": "length", "field": "x", "max": "ten"}]},
])
def test_a_spec_of_the_wrong_shape_is_a_422_not_a_crash(change: dict[str, Any]) -> None:
    with pytest.raises(ValidationFailed) as err:
        from_spec("k", {**GOOD, **change})
    assert err.value.code == "invalid_kind"
