"""The recipe format `ator.workflow/v1`: its published JSON Schema and the checks beyond it
(layer: workflows; imports jsonschema, ator.errors, ator.workflows.expressions).

A recipe is JSON: `steps` run in order, each seeing the run's `input` and the outputs of the
steps before it (`steps.<id>`); the run's output is `output` (an expression) or the last
step's. Step types of this version:

- `transform`: `expr`, a JSONata expression over `{input, steps}`.
- `map`: `over` (an expression giving a list), `step` (a transform run once per item over
  `{input, item, index}`), `concurrency` (items in flight at once). Its output is the list.
- `switch`: `cases` (`when` expressions tried in order, each with a `step`) and `default`;
  the chosen branch's output is the switch's; the others are `skipped`.
- `wait`: `seconds`, or `until` (an RFC 3339 time).

`on_error` (`pause`, the default, or `fail`) says what a failed step does to the run.
`budget.max_steps` counts every step including a map's items; `budget.wall_clock_s` is
the run's wall time excluding pauses. Both have operator defaults and ceilings.

`validate(recipe, limits)` raises ValidationFailed (`recipe_invalid`, 422) listing every
error at its JSON pointer (RFC 6901).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from ator.errors import ValidationFailed
from ator.workflows.expressions import parse_error

__all__ = ["FORMAT", "RECIPE_SCHEMA", "Limits", "pointer", "validate", "validate_input"]

FORMAT = "ator.workflow/v1"

_EXPR = {"type": "string", "minLength": 1, "maxLength": 10_000}
_CHILD = {
    "type": "object",
    "required": ["type", "expr"],
    "additionalProperties": False,
    "properties": {"type": {"const": "transform"}, "expr": {"$ref": "#/$defs/expr"}},
}
_COMMON = {"id": {"$ref": "#/$defs/id"}, "on_error": {"enum": ["pause", "fail"]},
           "description": {"type": "string", "maxLength": 2_000}}


def _step(kind: str, required: list[str], **props: Any) -> dict[str, Any]:
    return {"type": "object", "required": ["id", "type", *required],
            "additionalProperties": False,
            "properties": {**_COMMON, "type": {"const": kind}, **props}}


RECIPE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://ator.dev/schemas/ator.workflow/v1.json",
    "title": FORMAT,
    "type": "object",
    "required": ["schema", "steps"],
    "additionalProperties": False,
    "properties": {
        "schema": {"const": FORMAT},
        "description": {"type": "string", "maxLength": 4_000},
        "input": {"type": "object", "description": "a JSON Schema (2020-12) for the input"},
        "budget": {"type": "object", "additionalProperties": False, "properties": {
            "max_steps": {"type": "integer", "minimum": 1},
            "wall_clock_s": {"type": "number", "exclusiveMinimum": 0}}},
        "output": {"$ref": "#/$defs/expr"},
        "on_error": {"enum": ["pause", "fail"]},
        "steps": {"type": "array", "minItems": 1, "maxItems": 200,
                  "items": {"$ref": "#/$defs/step"}},
    },
    "$defs": {
        "id": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,62}$"},
        "expr": _EXPR,
        "child": _CHILD,
        "step": {
            "type": "object",
            "required": ["id", "type"],
            "properties": {"type": {"enum": ["transform", "map", "switch", "wait"]}},
            "allOf": [
                {"if": {"properties": {"type": {"const": "transform"}}},
                 "then": {"$ref": "#/$defs/transform"}},
                {"if": {"properties": {"type": {"const": "map"}}},
                 "then": {"$ref": "#/$defs/map"}},
                {"if": {"properties": {"type": {"const": "switch"}}},
                 "then": {"$ref": "#/$defs/switch"}},
                {"if": {"properties": {"type": {"const": "wait"}}},
                 "then": {"$ref": "#/$defs/wait"}},
            ],
        },
        "transform": _step("transform", ["expr"], expr={"$ref": "#/$defs/expr"}),
        "map": _step("map", ["over", "step"], over={"$ref": "#/$defs/expr"},
                     step={"$ref": "#/$defs/child"},
                     concurrency={"type": "integer", "minimum": 1, "maximum": 1_000}),
        "switch": _step("switch", ["cases"], cases={
            "type": "array", "minItems": 1, "maxItems": 50, "items": {
                "type": "object", "required": ["when", "step"], "additionalProperties": False,
                "properties": {"when": {"$ref": "#/$defs/expr"},
                               "step": {"$ref": "#/$defs/child"}}}},
            default={"$ref": "#/$defs/child"}),
        "wait": {**_step("wait", [], seconds={"type": "number", "minimum": 0,
                                              "maximum": 31_536_000},
                         until={"type": "string", "format": "date-time"}),
                 "oneOf": [{"required": ["seconds"]}, {"required": ["until"]}]},
    },
}

_VALIDATOR = Draft202012Validator(RECIPE_SCHEMA)


@dataclass(frozen=True, slots=True)
class Limits:
    """The operator's ceilings a recipe's budget may not exceed."""

    max_steps: int
    wall_clock_s: float


def pointer(path: Iterable[str | int]) -> str:
    """An RFC 6901 JSON pointer to `path`."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _error(path: Iterable[str | int], msg: str, kind: str) -> dict[str, Any]:
    parts = list(path)
    return {"pointer": pointer(parts), "loc": [str(p) for p in parts], "msg": msg,
            "type": kind}


def _schema_errors(errors: Iterable[ValidationError], base: list[str | int],
                   kind: str) -> list[dict[str, Any]]:
    return [_error([*base, *e.absolute_path], e.message, kind)
            for e in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path])]


def _expressions(recipe: dict[str, Any]) -> Iterator[tuple[list[str | int], str]]:
    if "output" in recipe:
        yield ["output"], recipe["output"]
    for i, step in enumerate(recipe["steps"]):
        base: list[str | int] = ["steps", i]
        for key in ("expr", "over"):
            if key in step:
                yield [*base, key], step[key]
        if "step" in step:
            yield [*base, "step", "expr"], step["step"]["expr"]
        for j, case in enumerate(step.get("cases", ())):
            yield [*base, "cases", j, "when"], case["when"]
            yield [*base, "cases", j, "step", "expr"], case["step"]["expr"]
        if "default" in step:
            yield [*base, "default", "expr"], step["default"]["expr"]


def validate(recipe: Any, limits: Limits) -> dict[str, Any]:
    """Check a recipe; returns it. Raises ValidationFailed listing each error's pointer."""
    errors = _schema_errors(_VALIDATOR.iter_errors(recipe), [], "recipe_invalid")
    if not errors:
        assert isinstance(recipe, dict)
        seen: dict[str, int] = {}
        for i, step in enumerate(recipe["steps"]):
            if step["id"] in seen:
                errors.append(_error(["steps", i, "id"], f"step id {step['id']!r} is also "
                                     f"the id of step {seen[step['id']]}", "duplicate_id"))
            seen.setdefault(step["id"], i)
        for path, expr in _expressions(recipe):
            if (why := parse_error(expr)) is not None:
                errors.append(_error(path, why, "expression_invalid"))
        if "input" in recipe:
            meta = Draft202012Validator(Draft202012Validator.META_SCHEMA)
            errors += _schema_errors(meta.iter_errors(recipe["input"]), ["input"],
                                     "input_schema_invalid")
        budget = recipe.get("budget", {})
        if budget.get("max_steps", 0) > limits.max_steps:
            errors.append(_error(["budget", "max_steps"], f"above the operator's ceiling "
                                 f"of {limits.max_steps}", "above_ceiling"))
        if budget.get("wall_clock_s", 0) > limits.wall_clock_s:
            errors.append(_error(["budget", "wall_clock_s"], f"above the operator's ceiling "
                                 f"of {limits.wall_clock_s:g}s", "above_ceiling"))
    if errors:
        first = errors[0]
        raise ValidationFailed(f"the recipe is not valid {FORMAT}: at "
                               f"{first['pointer'] or '/'}: {first['msg']}",
                               code="recipe_invalid", errors=errors)
    return dict(recipe)


def validate_input(recipe: dict[str, Any], value: Any) -> None:
    """Check a run's input against the recipe's input schema (before anything runs).
    Raises ValidationFailed (`input_invalid`) with each error's pointer."""
    schema = recipe.get("input")
    if schema is None:
        return
    errors = _schema_errors(Draft202012Validator(schema).iter_errors(value), [],
                            "input_invalid")
    if errors:
        raise ValidationFailed(f"the input does not match the recipe's input schema: at "
                               f"{errors[0]['pointer'] or '/'}: {errors[0]['msg']}",
                               code="input_invalid", errors=errors)
