"""An inbound webhook's mapping: data that says where a payload goes and what it says
(layer: webhooks; imports ator.errors, ator.workflows.expressions).

Every expression is JSONata over the payload (the same safe language as workflow
transforms, bounded and evaluated off the event loop; `$` is the payload). A mapping is
one of:

- `{"to": "thread", "thread_id": "<uuid>", "text": "<expr>"}`: a message in that thread;
- `{"to": "thread", "setup_id": "<uuid>", "key": "<expr>", "title": "<expr>",
  "text": "<expr>"}`: a message in the thread this key reached first (made on the setup
  the first time; the same key reaches the same thread). Without `key`, every request
  starts a thread of its own;
- `{"to": "workflow", "workflow_id": "<uuid>", "input": "<expr>", "key": "<expr>",
  "version": <n>}`: a run of that workflow (latest version unless named) with the input
  (default: the whole payload); the same key (default: the request) starts one run;
- `{"to": "analysis", "kind": "<name>", "target": "<expr>", "input": "<expr>"}`: a run of
  the org's analysis kind on that target with the input as its payload (default: the
  whole payload) — "a webhook arrived" as an analysis trigger; the analysis's own hash
  cache makes a redelivery free.

A text that is not a string is sent as compact JSON. A payload that is not JSON, an
expression that fails, or a value of the wrong kind is a `MappingError`, kept with the
request (replayable once the mapping is fixed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ator.errors import ValidationFailed
from ator.workflows.expressions import ExpressionError, Expressions, parse_error

__all__ = ["Mapped", "MappingError", "apply", "check_mapping"]

MAX_TEXT = 32_000
MAX_KEY = 200
MAX_EXPR = 4096
_FIELDS = {"thread": ({"to", "text"}, {"thread_id", "setup_id", "key", "title"}),
           "workflow": ({"to", "workflow_id"}, {"input", "key", "version"}),
           "analysis": ({"to", "kind", "target"}, {"input"})}
_EXPRESSIONS = ("text", "key", "title", "input", "target")


class MappingError(ValidationFailed):
    code = "webhook_mapping_failed"


def _invalid(message: str) -> ValidationFailed:
    return ValidationFailed(message, code="webhook_mapping_invalid")


def check_mapping(raw: Any) -> dict[str, Any]:
    """A mapping as stored. Raises ValidationFailed (422 `webhook_mapping_invalid`)."""
    if not isinstance(raw, dict) or raw.get("to") not in _FIELDS:
        raise _invalid('a mapping is an object whose "to" is "thread", "workflow" or '
                       '"analysis"')
    needed, optional = _FIELDS[raw["to"]]
    missing, unknown = sorted(needed - set(raw)), sorted(set(raw) - needed - optional)
    if missing or unknown:
        raise _invalid(f"a {raw['to']} mapping needs {sorted(needed)} and may have "
                       f"{sorted(optional)}; missing {missing}, unknown {unknown}")
    out = dict(raw)
    for name in _EXPRESSIONS:
        if name in out:
            expr = out[name]
            if not isinstance(expr, str) or not expr.strip() or len(expr) > MAX_EXPR:
                raise _invalid(f"{name} is a JSONata expression of 1 to {MAX_EXPR} characters")
            why = parse_error(expr)
            if why:
                raise _invalid(f"{name}: {why}")
    for name in ("thread_id", "setup_id", "workflow_id"):
        if name in out:
            try:
                out[name] = str(UUID(str(out[name])))
            except ValueError:
                raise _invalid(f"{name} is a UUID") from None
    if raw["to"] == "thread":
        if ("thread_id" in out) == ("setup_id" in out):
            raise _invalid("a thread mapping names either thread_id (one thread) or "
                           "setup_id (a thread per key)")
        if "thread_id" in out and ({"key", "title"} & set(out)):
            raise _invalid("key and title choose or make a thread: they go with setup_id")
    if raw["to"] == "analysis" and (not isinstance(out["kind"], str) or
                                    not 1 <= len(out["kind"]) <= 63):
        raise _invalid("kind names one of the org's analysis kinds")
    if "version" in out and (type(out["version"]) is not int or out["version"] < 1):
        raise _invalid("version is a published version number (≥ 1)")
    return out


@dataclass(frozen=True, slots=True)
class Mapped:
    """One payload through its mapping."""

    text: str | None = None
    key: str | None = None
    title: str = ""
    input: Any = None
    target: str | None = None


def _key(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise MappingError("the key is not a string or a number")
    key = str(value)
    if not key or len(key) > MAX_KEY:
        raise MappingError(f"the key has 1 to {MAX_KEY} characters")
    return key


async def apply(expressions: Expressions, mapping: dict[str, Any], body: bytes) -> Mapped:
    """Evaluate the mapping's expressions over the payload. Raises MappingError."""
    try:
        payload = json.loads(body)
    except ValueError as exc:
        raise MappingError(f"the payload is not JSON: {exc}") from None
    values: dict[str, Any] = {}
    for name in _EXPRESSIONS:
        if name in mapping:
            try:
                values[name] = await expressions.evaluate(mapping[name], payload)
            except ExpressionError as exc:
                raise MappingError(f"{name}: {exc.message}") from None
    if mapping["to"] == "workflow":
        return Mapped(key=_key(values.get("key")),
                      input=values["input"] if "input" in mapping else payload)
    if mapping["to"] == "analysis":
        given = values["input"] if "input" in mapping else payload
        if not isinstance(given, dict) or not given:
            raise MappingError("an analysis's input is a non-empty object")
        target = _key(values.get("target"))
        if target is None:
            raise MappingError("the mapping made no target")
        return Mapped(input=given, target=target)
    text = values.get("text")
    if text is not None and not isinstance(text, str):
        text = json.dumps(text, separators=(",", ":"), ensure_ascii=False)
    if not text or not text.strip():
        raise MappingError("the mapping made an empty message")
    title = values.get("title")
    return Mapped(text=text.strip()[:MAX_TEXT], key=_key(values.get("key")),
                  title=str(title)[:200] if title is not None else "")
