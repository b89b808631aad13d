"""Bounds on tenant-supplied free-form JSON and text (layer: security; imports ator.errors).

Whatever a tenant stores must be readable back, by every later request, cheaply: a value is
refused on write when it is larger, deeper or wider than its field's `JsonLimits`, or holds
what PostgreSQL's jsonb cannot store (NUL in a string or key, NaN, infinities). The walk is
iterative and stops at the first bound crossed, so a value nested 100 000 deep costs no
recursion and a huge one is not walked to its end.

Every refusal is a `ValidationFailed` (422) naming the field path:

    too_large         serialized size over `max_bytes`, or a string over `max_string`
    too_deep          nesting over `max_depth` (a flat object is depth 1)
    too_many_items    more than `max_items` values in all
    unstorable_value  NUL, NaN, ±inf, or a value that is not JSON at all (`check_storable`
                      walks any request body for NUL, in one place for every route)
    too_long          a text field over its character limit (`check_text`)

A user message is checked by `check_message`, the one rule for every transport (HTTP, the
socket, the Python API): `invalid_message`, `empty_message`, `message_too_long`,
`unstorable_value` for its text, `invalid_client_message_id` for its id.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ator.errors import ValidationFailed

__all__ = [
    "CLIENT_MESSAGE_ID",
    "INSTRUCTIONS_CHARS",
    "MESSAGE_CHARS",
    "PERSONA_CHARS",
    "SECRET_VALUE_CHARS",
    "SETUP_CONFIG",
    "THREAD_METADATA",
    "TITLE_CHARS",
    "TOOL_POLICY",
    "JsonLimits",
    "Loc",
    "check_json",
    "check_message",
    "check_storable",
    "check_text",
    "refuse",
]

Loc = Sequence[str | int]


@dataclass(frozen=True, slots=True)
class JsonLimits:
    """How big one free-form JSON field may be. Sizes are bytes of its compact JSON (strings
    counted as UTF-8, escapes ignored: a close, cheap upper-bound-ish estimate)."""

    max_bytes: int
    max_depth: int
    max_items: int = 10_000
    max_string: int | None = None  # per string (and per key); None: only max_bytes


# A thread's metadata is the tenant's tags and references, not a document store: 20 threads
# at the limit make a 200-thread list page about 13 MB at worst, not 200 MB.
THREAD_METADATA = JsonLimits(max_bytes=64 * 1024, max_depth=16, max_items=2_000)
# A setup's config: provider options, caps and (scripted) a script of steps whose tool inputs
# nest a little.
SETUP_CONFIG = JsonLimits(max_bytes=256 * 1024, max_depth=32, max_items=20_000)
TOOL_POLICY = JsonLimits(max_bytes=64 * 1024, max_depth=3, max_items=2_100)

TITLE_CHARS = 500
PERSONA_CHARS = 50_000
INSTRUCTIONS_CHARS = 50_000
SECRET_VALUE_CHARS = 20_000
MESSAGE_CHARS = 100_000
#: What a client's idempotency id for a message may be (both transports, the same rule).
CLIENT_MESSAGE_ID = r"^[A-Za-z0-9._:\-]{1,200}$"
_CLIENT_MESSAGE_ID = re.compile(CLIENT_MESSAGE_ID)


def refuse(loc: Loc, message: str, code: str) -> ValidationFailed:
    """A 422 naming the field: detail "loc.path: message", and `errors` in the shape of a
    request validation error."""
    path = _dotted(loc)
    return ValidationFailed(
        f"{path}: {message}" if path else message,
        code=code,
        errors=[{"loc": [str(p) for p in loc], "msg": message, "type": code}],
    )


def check_text(value: str, loc: Loc, max_chars: int) -> None:
    """Refuse text over `max_chars` characters (`too_long`) or holding NUL."""
    if len(value) > max_chars:
        raise refuse(loc, f"longer than {max_chars} characters", "too_long")
    if "\x00" in value:
        raise refuse(loc, "contains a NUL character, which cannot be stored",
                     "unstorable_value")


def check_message(text: object, client_message_id: object) -> None:
    """Refuse a user message its transport cannot be trusted to have checked: the text a
    non-empty string of at most MESSAGE_CHARS characters, the id absent or matching
    CLIENT_MESSAGE_ID, NUL in neither (`unstorable_value` first, as every request body)."""
    if not isinstance(text, str):
        raise refuse(("text",), "must be a string", "invalid_message")
    if client_message_id is not None and not isinstance(client_message_id, str):
        raise refuse(("client_message_id",), "must be a string", "invalid_client_message_id")
    check_storable({"text": text, "client_message_id": client_message_id})
    if not text.strip():
        raise refuse(("text",), "the message text is empty", "empty_message")
    if len(text) > MESSAGE_CHARS:
        raise refuse(("text",), f"longer than {MESSAGE_CHARS} characters", "message_too_long")
    if client_message_id is not None and _CLIENT_MESSAGE_ID.fullmatch(client_message_id) is None:
        raise refuse(("client_message_id",), "must be 1-200 characters of A-Z a-z 0-9 . _ : -",
                     "invalid_client_message_id")


def check_storable(value: Any, loc: Loc = ()) -> None:
    """Refuse NUL anywhere in a request body (a string or a key, at any depth): PostgreSQL
    cannot store it in text or jsonb. Iterative, like `check_json`."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, tuple(loc))]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                raise refuse(path, "contains a NUL character, which cannot be stored",
                             "unstorable_value")
        elif isinstance(node, dict):
            for key, child in node.items():
                if isinstance(key, str) and "\x00" in key:
                    raise refuse((*path, key), "contains a NUL character, which cannot be "
                                               "stored", "unstorable_value")
                stack.append((child, (*path, str(key))))
        elif isinstance(node, list | tuple):
            stack.extend((child, (*path, i)) for i, child in enumerate(node))


def check_json(value: Any, limits: JsonLimits, loc: Loc) -> None:
    """Raise `ValidationFailed` if `value` (plain JSON data: dict, list, str, int, float,
    bool, None) crosses `limits` or cannot be stored. The path of the first offending
    value is in the error."""
    size = 0
    items = 1  # the root, plus every container's children when the container is seen
    # (value, depth of its container level, path); depth counts containers entered.
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 0, tuple(loc))]
    while stack:
        node, depth, path = stack.pop()
        if isinstance(node, dict | list | tuple):
            # Count a container's children before walking them: a million-key object is
            # refused at once, not after a million pushes.
            items += len(node)
        if items > limits.max_items:
            raise refuse(loc, f"holds more than {limits.max_items} values", "too_many_items")
        if isinstance(node, dict):
            depth += 1
            if depth > limits.max_depth:
                raise refuse(path, f"nested deeper than {limits.max_depth} levels", "too_deep")
            size += 2 + max(0, len(node) - 1)  # braces and commas
            for key, child in node.items():
                if not isinstance(key, str):
                    raise refuse(path, "object keys must be strings", "unstorable_value")
                size += _string_size(key, limits, (*path, key)) + 1  # the colon
                if size > limits.max_bytes:
                    break  # refused just below, without reading the remaining keys
                stack.append((child, depth, (*path, key)))
        elif isinstance(node, list | tuple):
            depth += 1
            if depth > limits.max_depth:
                raise refuse(path, f"nested deeper than {limits.max_depth} levels", "too_deep")
            size += 2 + max(0, len(node) - 1)
            for i, child in enumerate(node):
                stack.append((child, depth, (*path, i)))
        elif isinstance(node, str):
            size += _string_size(node, limits, path)
        elif node is None or isinstance(node, bool):
            size += 5
        elif isinstance(node, int):
            size += len(str(node)) if abs(node) < 10**30 else 32  # no giant str() on a bignum
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise refuse(path, "NaN and infinities cannot be stored", "unstorable_value")
            size += 24
        else:
            raise refuse(path, f"{type(node).__name__} is not a JSON value", "unstorable_value")
        if size > limits.max_bytes:
            raise refuse(loc, f"larger than {limits.max_bytes} bytes as JSON", "too_large")


def _string_size(text: str, limits: JsonLimits, path: Loc) -> int:
    if limits.max_string is not None and len(text) > limits.max_string:
        raise refuse(path, f"a string longer than {limits.max_string} characters", "too_large")
    if "\x00" in text:
        raise refuse(path, "contains a NUL character, which cannot be stored",
                     "unstorable_value")
    # Cheap: len() is the byte count for ASCII; non-ASCII is up to 4 bytes a character.
    return len(text) + 2 if text.isascii() else len(text.encode("utf-8", "surrogatepass")) + 2


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out
