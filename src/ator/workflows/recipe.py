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
from ator.workflows.step_types import StepType, StepTypes
from ator.workflows.types import builtin_types

__all__ = ["FORMAT", "RECIPE_SCHEMA", "Limits", "Recipes", "pointer", "recipe_schema", "validate",
           "validate_input"]

FORMAT = "ator.workflow/v1"

_EXPR = {"type": "string", "minLength": 1, "maxLength": 10_000}


def _dispatch(types: list[StepType], child: bool) -> dict[str, Any]:
    """One schema for "a step": the `type` names, then each type's own schema by `if`."""
    chosen = [t for t in types if not child or t.child_schema is not None]
    ref = "c_" if child else "s_"
    return {"type": "object", "required": ["type"] if child else ["id", "type"],
            "properties": {"type": {"enum": [t.name for t in chosen]}},
            "allOf": [{"if": {"properties": {"type": {"const": t.name}}},
                       "then": {"$ref": f"#/$defs/{ref}{t.name}"}} for t in chosen]}


def recipe_schema(types: Iterable[StepType]) -> dict[str, Any]:
    """The published JSON Schema of a recipe whose steps are of `types`."""
    found = list(types)
    defs: dict[str, Any] = {"id": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,62}$"},
                            "expr": _EXPR, "step": _dispatch(found, False),
                            "child": _dispatch(found, True)}
    for t in found:
        defs[f"s_{t.name}"] = t.schema
        if t.child_schema is not None:
            defs[f"c_{t.name}"] = t.child_schema
    return {
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
                "wall_clock_s": {"type": "number", "exclusiveMinimum": 0},
                "usd": {"type": "number", "exclusiveMinimum": 0},
                "idle_s": {"type": "number", "exclusiveMinimum": 0}}},
            "output": {"$ref": "#/$defs/expr"},
            "on_error": {"enum": ["pause", "fail"]},
            "steps": {"type": "array", "minItems": 1, "maxItems": 200,
                      "items": {"$ref": "#/$defs/step"}},
        },
        "$defs": defs,
    }


@dataclass(frozen=True, slots=True)
class Limits:
    """The operator's ceilings a recipe's budget may not exceed."""

    max_steps: int
    wall_clock_s: float
    usd: float = 1e9
    idle_s: float = 1e9


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


def _walk(types: StepTypes, spec: dict[str, Any], base: list[str | int]
          ) -> Iterator[tuple[list[str | int], str, str]]:
    """Every expression and semantic error of a step and its children, at its path:
    (path, text, kind) with kind `expr` or `error`."""
    kind = types[spec["type"]]
    for rel, expr in kind.expressions(spec):
        yield [*base, *rel], expr, "expr"
    for rel, why in kind.check(spec):
        yield [*base, *rel], why, "error"
    for rel, child in kind.children(spec):
        yield from _walk(types, child, [*base, *rel])


class Recipes:
    """Checks recipes against the schema of the registry's step types and the operator's
    ceilings."""

    def __init__(self, types: StepTypes, limits: Limits) -> None:
        self.types = types
        self.limits = limits
        self.schema = recipe_schema(types)
        self._validator = Draft202012Validator(self.schema)

    def validate(self, recipe: Any) -> dict[str, Any]:
        """Check a recipe; returns it. Raises ValidationFailed listing each error's pointer."""
        return _validate(self, recipe)


def validate(recipe: Any, limits: Limits) -> dict[str, Any]:
    """Check a recipe against the built-in types (`Recipes.validate` of a default registry)."""
    return Recipes(StepTypes(builtin_types()), limits).validate(recipe)


def _validate(recipes: Recipes, recipe: Any) -> dict[str, Any]:
    limits = recipes.limits
    errors = _schema_errors(recipes._validator.iter_errors(recipe), [], "recipe_invalid")
    if not errors:
        assert isinstance(recipe, dict)
        seen: dict[str, int] = {}
        for i, step in enumerate(recipe["steps"]):
            if step["id"] in seen:
                errors.append(_error(["steps", i, "id"], f"step id {step['id']!r} is also "
                                     f"the id of step {seen[step['id']]}", "duplicate_id"))
            seen.setdefault(step["id"], i)
        if "output" in recipe and (why := parse_error(recipe["output"])) is not None:
            errors.append(_error(["output"], why, "expression_invalid"))
        for i, step in enumerate(recipe["steps"]):
            for path, text, what in _walk(recipes.types, step, ["steps", i]):
                if what == "error":
                    errors.append(_error(path, text, "step_invalid"))
                elif (why := parse_error(text)) is not None:
                    errors.append(_error(path, why, "expression_invalid"))
        if "input" in recipe:
            meta = Draft202012Validator(Draft202012Validator.META_SCHEMA)
            errors += _schema_errors(meta.iter_errors(recipe["input"]), ["input"],
                                     "input_schema_invalid")
        budget = recipe.get("budget", {})
        if budget.get("max_steps", 0) > limits.max_steps:
            errors.append(_error(["budget", "max_steps"], f"above the operator's ceiling "
                                 f"of {limits.max_steps}", "above_ceiling"))
        for key, ceiling in (("wall_clock_s", limits.wall_clock_s), ("usd", limits.usd),
                             ("idle_s", limits.idle_s)):
            if budget.get(key, 0) > ceiling:
                errors.append(_error(["budget", key], f"above the operator's ceiling of "
                                     f"{ceiling:g}", "above_ceiling"))
    if errors:
        first = errors[0]
        raise ValidationFailed(f"the recipe is not valid {FORMAT}: at "
                               f"{first['pointer'] or '/'}: {first['msg']}",
                               code="recipe_invalid", errors=errors)
    return dict(recipe)


#: The schema of the built-in step types (what `GET /v1/workflows/schema` serves).
RECIPE_SCHEMA = recipe_schema(builtin_types())


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
