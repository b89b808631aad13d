"""An inbound webhook's mapping to a thread message (layer: webhooks; imports ator.errors and
the stdlib).

The mapping is data: `{"text": "<template>"}`, where `{/a/b}` in the template is replaced by
the JSON-pointer (RFC 6901) value at `/a/b` of the payload (strings as they are, anything else
as compact JSON) and `{{` / `}}` are literal braces. A pointer to nothing, or a payload that is
not JSON, is a `MappingError` kept with the request. This is the first slice's mapping
language; the workflows' safe expression language replaces it when workflows land.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ator.errors import ValidationFailed

__all__ = ["MappingError", "check_mapping", "render"]

_FIELD = re.compile(r"\{\{|\}\}|\{(/[^{}]*)\}")
MAX_TEXT = 32_000


class MappingError(ValidationFailed):
    code = "webhook_mapping_failed"


def check_mapping(mapping: Any) -> dict[str, Any]:
    """A mapping as stored; raises ValidationFailed (422) when it is not one."""
    if not isinstance(mapping, dict) or set(mapping) != {"text"} \
            or not isinstance(mapping["text"], str) or not mapping["text"]:
        raise ValidationFailed('a mapping is {"text": "<template with {/json/pointer}>"}',
                               code="webhook_mapping_invalid")
    return {"text": mapping["text"]}


def _pointer(doc: Any, pointer: str) -> Any:
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(doc, dict) and token in doc:
            doc = doc[token]
        elif isinstance(doc, list) and token.isdigit() and int(token) < len(doc):
            doc = doc[int(token)]
        else:
            raise MappingError(f"the payload has nothing at {pointer}")
    return doc


def render(mapping: dict[str, Any], body: bytes) -> str:
    """The message text for one payload. Raises MappingError."""
    try:
        payload = json.loads(body)
    except ValueError as exc:
        raise MappingError(f"the payload is not JSON: {exc}") from None

    def field(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        value = _pointer(payload, match.group(1))
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))

    text = _FIELD.sub(field, str(mapping["text"])).strip()
    if not text:
        raise MappingError("the mapping made an empty message")
    return text[:MAX_TEXT]
