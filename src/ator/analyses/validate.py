"""Validating a model's output in code (layer: analyses; imports jsonschema, ator.jsonenc).

A model's text is never trusted: it must parse as one JSON object (a ```json fence around it
is tolerated), pass the kind's JSON Schema, and then each validator in order:

- `Vocabulary(field, values, on_miss)`: a closed vocabulary. A value that matches one of
  `values` but for case, spaces or `-`/`_` is *cleaned* to it; one that matches none is
  replaced by `default` (cleaned) or dropped from a list (cleaned) or, with
  `on_miss="reject"`, rejects the output;
- `Length(field, max, on_over)`: a string (or each string of a list, or a list's length) over
  `max` is *cut* to it, or rejects the output with `on_over="reject"`;
- `Reference(field, within | record, on_miss)`: ids that must exist, among the values of an
  input list (`within`) or as the org's records (`record`: thread, analysis, setup, checked by
  the caller's `exists`); a missing one is dropped (cleaned) or rejects the output.

The verdict is the strongest thing that happened: `reject` > `cut` > `clean` > `accept`, plus
`unparseable` when the text is not JSON at all. A rejected or unparseable output is never
stored as the model's: the kind's rule runs instead (runner.py).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema

from ator import jsonenc

__all__ = ["VERDICTS", "Exists", "Length", "Reference", "Schema", "Validator", "Verdict",
           "Vocabulary", "checker", "parse_output", "validate"]

#: What a validator can do to an output, weakest first.
VERDICTS = ("accept", "clean", "cut", "reject", "unparseable")
_RANK = {v: i for i, v in enumerate(VERDICTS)}

Exists = Callable[[str, list[str]], Awaitable[set[str]]]


@dataclass(frozen=True, slots=True)
class Vocabulary:
    field: str
    values: tuple[str, ...]
    on_miss: Literal["clean", "reject"] = "clean"
    default: str | None = None


@dataclass(frozen=True, slots=True)
class Length:
    field: str
    max: int
    on_over: Literal["cut", "reject"] = "cut"


@dataclass(frozen=True, slots=True)
class Reference:
    field: str
    within: str | None = None  # an input field holding the allowed ids (a list)
    record: str | None = None  # or the org's records of this type
    on_miss: Literal["drop", "reject"] = "reject"


Validator = Vocabulary | Length | Reference


@dataclass(slots=True)
class Verdict:
    verdict: str = "accept"
    output: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)

    def note(self, verdict: str, problem: str) -> None:
        if _RANK[verdict] > _RANK[self.verdict]:
            self.verdict = verdict
        self.problems.append(problem)

    @property
    def usable(self) -> bool:
        return self.verdict not in ("reject", "unparseable") and self.output is not None


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_output(text: str) -> dict[str, Any] | None:
    """The JSON object in a model's reply, or None."""
    found = _FENCE.match(text)
    raw = found.group(1) if found else text
    try:
        value = jsonenc.loads(raw.strip())
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _norm(value: str) -> str:
    return re.sub(r"[\s_\-]+", " ", value).strip().casefold()


#: An output schema: a JSON Schema object, or one compiled by `checker`.
Schema = Any


def checker(schema: dict[str, Any]) -> Any:
    """A compiled JSON Schema (build once per kind: compiling costs more than checking)."""
    return jsonschema.Draft202012Validator(schema)


async def validate(text: str, schema: Schema, validators: Sequence[Validator], *,
                   input: dict[str, Any], exists: Exists | None = None) -> Verdict:
    """The verdict on a model's reply `text` for this kind (never raises on bad output)."""
    out = parse_output(text)
    if out is None:
        return Verdict("unparseable", None, ["the reply is not one JSON object"])
    return await check(out, schema, validators, input=input, exists=exists)


async def check(out: dict[str, Any], schema: Schema, validators: Sequence[Validator],
                *, input: dict[str, Any], exists: Exists | None = None) -> Verdict:
    """The verdict on a parsed output (a copy is cleaned and cut; `out` is left alone)."""
    out = jsonenc.loads(jsonenc.dumps(out))
    verdict = Verdict("accept", out)
    for v in validators:
        if v.field not in out:
            continue
        if isinstance(v, Vocabulary):
            _vocabulary(v, out, verdict)
        elif isinstance(v, Length):
            _length(v, out, verdict)
        else:
            await _reference(v, out, verdict, input, exists)
        if verdict.verdict == "reject":
            return verdict
    # The schema last: a cleaned or cut output must still be what the kind promises.
    compiled = checker(schema) if isinstance(schema, dict) else schema
    errors = sorted(compiled.iter_errors(out), key=str)
    if errors:
        verdict.note("reject", f"schema: {errors[0].message}"[:300])
    return verdict


def _vocabulary(v: Vocabulary, out: dict[str, Any], verdict: Verdict) -> None:
    canon = {_norm(x): x for x in v.values}
    value = out[v.field]
    items = value if isinstance(value, list) else [value]
    kept: list[Any] = []
    for item in items:
        if isinstance(item, str) and item in v.values:
            kept.append(item)
            continue
        match = canon.get(_norm(item)) if isinstance(item, str) else None
        if match is not None:
            kept.append(match)
            verdict.note("clean", f"{v.field}: {item!r} cleaned to {match!r}")
        elif v.on_miss == "reject":
            verdict.note("reject", f"{v.field}: {item!r} is outside the vocabulary")
            return
        elif v.default is not None:
            kept.append(v.default)
            verdict.note("clean", f"{v.field}: {item!r} replaced by {v.default!r}")
        elif isinstance(value, list):
            verdict.note("clean", f"{v.field}: {item!r} dropped (outside the vocabulary)")
        else:
            verdict.note("reject", f"{v.field}: {item!r} is outside the vocabulary")
            return
    out[v.field] = kept if isinstance(value, list) else kept[0]


def _length(v: Length, out: dict[str, Any], verdict: Verdict) -> None:
    value = out[v.field]
    if isinstance(value, str):
        if len(value) > v.max:
            if v.on_over == "reject":
                verdict.note("reject", f"{v.field}: {len(value)} characters, at most {v.max}")
                return
            out[v.field] = value[: v.max]
            verdict.note("cut", f"{v.field}: cut from {len(value)} to {v.max} characters")
    elif isinstance(value, list):
        over = len(value) > v.max
        if over and v.on_over == "reject":
            verdict.note("reject", f"{v.field}: {len(value)} items, at most {v.max}")
            return
        if over:
            out[v.field] = value[: v.max]
            verdict.note("cut", f"{v.field}: cut from {len(value)} to {v.max} items")


async def _reference(v: Reference, out: dict[str, Any], verdict: Verdict,
                     input: dict[str, Any], exists: Exists | None) -> None:
    value = out[v.field]
    items = value if isinstance(value, list) else [value]
    ids = [str(x) for x in items]
    if v.within is not None:
        allowed = {str(x) for x in input.get(v.within) or []}
        found = {x for x in ids if x in allowed}
    elif v.record is not None and exists is not None:
        found = await exists(v.record, ids)
    else:
        found = set()
    missing = [x for x in ids if x not in found]
    if not missing:
        return
    if v.on_miss == "reject" or not isinstance(value, list):
        verdict.note("reject", f"{v.field}: {missing[:3]} do not exist")
        return
    out[v.field] = [x for x in items if str(x) in found]
    verdict.note("clean", f"{v.field}: dropped {len(missing)} that do not exist")
