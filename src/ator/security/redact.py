"""Redaction of secret-looking fields (layer: security; imports nothing of ator).

Used on config snapshots, logs, errors and API responses. A value that is a secret
*reference* ("secret:NAME") is kept: it names a secret without revealing it.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["REDACTED", "is_secret_key", "redact"]

REDACTED = "[redacted]"
_SECRET_KEY = re.compile(
    r"(api[_-]?key|token|secret|password|passwd|authorization|auth|credential|private[_-]?key)",
    re.IGNORECASE,
)
_SECRET_VALUE = re.compile(r"^(sk-|sk_|xox[abp]-|ghp_|AKIA|Bearer\s)")


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def redact(value: Any) -> Any:
    """A deep copy of `value` with secret fields and secret-looking strings replaced."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if is_secret_key(str(k)) and not _is_reference(v) and v not in (None, "", False):
                out[k] = REDACTED
            else:
                out[k] = redact(v)
        return out
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str) and _SECRET_VALUE.match(value):
        return REDACTED
    return value


def _is_reference(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("secret:")
