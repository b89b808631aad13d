"""An analysis kind, as data (layer: analyses; imports jsonschema, ator.errors,
ator.analyses.validate, ator.analyses.inputs).

A kind says everything about one recurring piece of model work:

- `input`: how its input is built for a target (`inputs.py`: a provided payload, a thread's
  messages, another kind's latest analysis of the target, or any async callable in code);
  None means "nothing to analyze";
- `key_fields`: the input fields that change the answer (all of them when empty); with the
  kind's `version` and the documents the input read (id, version), they make the hash;
- `system`, `prompt`: the prompt layers; `{{input}}` in the prompt is the input's JSON,
  `{{field}}` one field of it;
- `provider`, `model`, `config`, `max_tokens`: the model and its caps;
- `schema` (a JSON Schema of the output) and `validators` (validate.py);
- `rule`: the deterministic fallback (`input -> output`); it must satisfy the schema;
- `apply`: what a stored result does next (`record`, `thread_message` into the target
  thread, `webhook` (an `analysis.generated` event), `workflow`: a run of `workflow_id`
  started with the output as its input, once per analysis);
- `at_limit`: at the org's monthly limit, `rule` (store the rule's result, no model call)
  or `refuse` (store nothing);
- `then`: kinds chained after this one by default; `evals`: its eval cases (evals.py);
  `triggers`: events that start it (`turn_ended`: the thread whose turn ended is the target).

Kinds defined in code are `AnalysisKind`s; an org's kinds are JSON specs (`from_spec`),
checked once when registered: a spec that does not parse never reaches a run.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from ator import jsonenc
from ator.analyses.inputs import InputBuilder, builder_from_spec
from ator.analyses.validate import Length, Reference, Validator, Vocabulary, checker
from ator.errors import ValidationFailed

__all__ = ["APPLY", "AT_LIMIT", "TRIGGERS", "AnalysisKind", "EvalCase", "Rule", "check_rule",
           "from_spec", "render"]

Rule = Callable[[dict[str, Any]], dict[str, Any]]
APPLY = ("record", "thread_message", "webhook", "workflow")
AT_LIMIT = ("rule", "refuse")
TRIGGERS = ("turn_ended",)
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


@dataclass(frozen=True, slots=True)
class EvalCase:
    """A fixed model output and what the validator must do with it."""

    name: str
    output: str  # the model's reply text, as it would arrive
    expect: str  # accept, clean, cut, reject (or unparseable)
    input: dict[str, Any] = field(default_factory=dict)
    expect_output: dict[str, Any] | None = None  # the stored output, when given


@dataclass(frozen=True, slots=True)
class AnalysisKind:
    name: str
    input: InputBuilder
    schema: dict[str, Any]
    rule: Rule
    version: int = 1
    key_fields: tuple[str, ...] = ()
    system: str = ""
    prompt: str = "{{input}}"
    provider: str = "scripted"
    model: str = "scripted"
    config: Mapping[str, Any] = field(default_factory=dict)
    max_tokens: int = 1024
    validators: tuple[Validator, ...] = ()
    apply: tuple[str, ...] = ("record",)
    at_limit: str = "rule"
    then: tuple[str, ...] = ()
    evals: tuple[EvalCase, ...] = ()
    triggers: tuple[str, ...] = ()  # events that start it: turn_ended
    workflow_id: str | None = None  # apply `workflow`: the workflow whose run it starts
    org_defined: bool = False
    # The output schema compiled once (set in __post_init__).
    checker: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValidationFailed("a kind's name is lowercase letters, digits and _ "
                                   "(at most 63)", code="invalid_kind")
        if self.at_limit not in AT_LIMIT:
            raise ValidationFailed(f"at_limit is one of {', '.join(AT_LIMIT)}",
                                   code="invalid_kind")
        unknown = [a for a in self.apply if a not in APPLY]
        if unknown:
            raise ValidationFailed(f"unknown apply steps {unknown}; known: {list(APPLY)}",
                                   code="invalid_kind")
        try:
            jsonschema.Draft202012Validator.check_schema(self.schema)
        except jsonschema.SchemaError as exc:
            raise ValidationFailed(f"output schema: {exc.message}",
                                   code="invalid_kind") from None
        if ("workflow" in self.apply) != (self.workflow_id is not None):
            raise ValidationFailed("apply `workflow` and workflow_id go together",
                                   code="invalid_kind")
        if self.workflow_id is not None:
            try:
                uuid.UUID(self.workflow_id)
            except ValueError:
                raise ValidationFailed("workflow_id is a workflow's id",
                                       code="invalid_kind") from None
        if any(t not in TRIGGERS for t in self.triggers):
            raise ValidationFailed(f"triggers are among {list(TRIGGERS)}", code="invalid_kind")
        if not 1 <= self.max_tokens <= 64_000:
            raise ValidationFailed("max_tokens is between 1 and 64000", code="invalid_kind")
        object.__setattr__(self, "checker", checker(self.schema))

    @property
    def label(self) -> str:
        """What its model calls are recorded under (`model_calls.purpose`)."""
        return f"analysis:{self.name}"


def render(template: str, data: dict[str, Any]) -> str:
    """`{{input}}` is the whole input's JSON, `{{name}}` one field (JSON unless a string)."""
    def one(match: re.Match[str]) -> str:
        key = match.group(1)
        if key == "input":
            return jsonenc.dumps(data)
        value = data.get(key, "")
        return value if isinstance(value, str) else jsonenc.dumps(value)

    return re.sub(r"\{\{\s*(\w+)\s*\}\}", one, template)


def _validator(raw: Any) -> Validator:
    if not isinstance(raw, dict) or not isinstance(raw.get("field"), str):
        raise ValidationFailed("each validator is an object with a field",
                               code="invalid_kind")
    t = raw.get("type")
    try:
        if t == "vocabulary":
            values = raw["values"]
            if not isinstance(values, list) or not values or not all(
                    isinstance(v, str) for v in values):
                raise ValidationFailed("a vocabulary's values are a non-empty list of strings",
                                       code="invalid_kind")
            return Vocabulary(raw["field"], tuple(values), raw.get("on_miss", "clean"),
                              raw.get("default"))
        if t == "length":
            return Length(raw["field"], int(raw["max"]), raw.get("on_over", "cut"))
        if t == "reference":
            if raw.get("record") not in (None, "thread", "analysis", "setup"):
                raise ValidationFailed("a reference's record is thread, analysis or setup",
                                       code="invalid_kind")
            if raw.get("within") is None and raw.get("record") is None:
                raise ValidationFailed("a reference names `within` (an input field) or "
                                       "`record`", code="invalid_kind")
            return Reference(raw["field"], raw.get("within"), raw.get("record"),
                             raw.get("on_miss", "reject"))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValidationFailed(f"validator {t!r}: {exc}", code="invalid_kind") from None
    raise ValidationFailed("a validator's type is vocabulary, length or reference",
                           code="invalid_kind")


def _rule_from_spec(raw: Any) -> Rule:
    """`{"output": {...}, "copy": {"out_field": "input_field"}}`: a constant output with
    fields copied from the input."""
    if not isinstance(raw, dict) or not isinstance(raw.get("output"), dict):
        raise ValidationFailed("rule is {\"output\": {...}, \"copy\": {...}}",
                               code="invalid_kind")
    constant: dict[str, Any] = raw["output"]
    copy = raw.get("copy") or {}
    if not isinstance(copy, dict):
        raise ValidationFailed("rule.copy maps output fields to input fields",
                               code="invalid_kind")

    def rule(data: dict[str, Any]) -> dict[str, Any]:
        out = jsonenc.loads(jsonenc.dumps(constant))
        for to, source in copy.items():
            if source in data:
                out[to] = data[source]
        return dict(out)

    return rule


def _strings(raw: Any, what: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise ValidationFailed(f"{what} is a list of strings", code="invalid_kind")
    return tuple(raw)


def _cases(raw: Any) -> tuple[EvalCase, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValidationFailed("evals is a list of cases", code="invalid_kind")
    out = []
    for i, c in enumerate(raw):
        if not isinstance(c, dict) or not isinstance(c.get("output"), str) or c.get(
                "expect") not in ("accept", "clean", "cut", "reject", "unparseable"):
            raise ValidationFailed(f"eval case {i}: {{output: str, expect: accept|clean|cut|"
                                   "reject|unparseable}", code="invalid_kind")
        out.append(EvalCase(str(c.get("name", f"case{i}")), c["output"], c["expect"],
                            dict(c.get("input") or {}), c.get("expect_output")))
    return tuple(out)


def _int(raw: Any, what: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ValidationFailed(f"{what} is an integer", code="invalid_kind")
    return raw


def from_spec(name: str, spec: Mapping[str, Any], *, version: int = 1) -> AnalysisKind:
    """An org's kind from its JSON spec. Raises ValidationFailed (`invalid_kind`)."""
    if not isinstance(spec, Mapping):
        raise ValidationFailed("a kind's spec is an object", code="invalid_kind")
    model = spec.get("model") or {}
    if not isinstance(model, dict):
        raise ValidationFailed("model is {provider, model, config, max_tokens}",
                               code="invalid_kind")
    schema = spec.get("output_schema")
    if not isinstance(schema, dict):
        raise ValidationFailed("output_schema (a JSON Schema object) is required",
                               code="invalid_kind")
    validators = spec.get("validators") or []
    if not isinstance(validators, list):
        raise ValidationFailed("validators is a list", code="invalid_kind")
    try:
        kind = AnalysisKind(
            name=name, version=version, input=builder_from_spec(spec.get("input")),
            schema=schema, rule=_rule_from_spec(spec.get("rule")),
            key_fields=_strings(spec.get("key_fields"), "key_fields"),
            system=str(spec.get("system", "")), prompt=str(spec.get("prompt", "{{input}}")),
            provider=str(model.get("provider", "scripted")),
            model=str(model.get("model", "scripted")), config=dict(model.get("config") or {}),
            max_tokens=_int(model.get("max_tokens", 1024), "model.max_tokens"),
            validators=tuple(_validator(v) for v in validators),
            apply=_strings(spec.get("apply"), "apply") or ("record",),
            at_limit=str(spec.get("at_limit", "rule")),
            then=_strings(spec.get("then"), "then"), evals=_cases(spec.get("evals")),
            triggers=_strings(spec.get("triggers"), "triggers"),
            workflow_id=str(spec["workflow_id"]) if spec.get("workflow_id") is not None else None,
            org_defined=True)
    except (TypeError, ValueError, AttributeError) as exc:  # a field of the wrong shape
        raise ValidationFailed(f"invalid spec: {exc}"[:300], code="invalid_kind") from None
    check_rule(kind)
    return kind


def check_rule(kind: AnalysisKind, sample: dict[str, Any] | None = None) -> None:
    """The rule's output must satisfy the kind's schema (else the fallback is no fallback)."""
    try:
        errors = list(kind.checker.iter_errors(kind.rule(sample or {})))
    except Exception as exc:  # an org's schema that cannot be evaluated
        # (an unresolvable $ref, a bad pattern) is its spec's error, reported as such.
        raise ValidationFailed(f"output_schema cannot be evaluated: {exc}"[:300],
                               code="invalid_kind") from None
    if errors:
        raise ValidationFailed(f"the rule's output does not match output_schema: "
                               f"{errors[0].message}", code="invalid_kind")
