"""Which keys hold credentials, and redaction of them (layer: security; imports nothing of
ator).

One rule, used both to refuse clear credentials in a setup's config (`providers.config`) and
to redact config snapshots, logs, errors and API responses: a key is a credential key when its
name, lower-cased with `-` read as `_`, is one of `CREDENTIAL_KEYS` exactly, or when it is a
header-style name ending in `-key`, `-token`, `-secret` or `-password` (`X-Goog-Api-Key`,
`X-Auth-Token`). Nothing is matched by substring, so caps such as `max_output_tokens` and keys
such as `author` or `tokens_per_min` are neither redacted nor refused.

A value that is a secret *reference* ("secret:NAME") is kept: it names a secret without
revealing it. Strings that look like credentials wherever they are (`sk-…`, `Bearer …`) and
the userinfo of URLs (`https://user:pass@host`) are redacted too.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "CREDENTIAL_KEYS",
    "REDACTED",
    "is_reference",
    "is_secret_key",
    "redact",
    "restore_redacted",
    "url_userinfo",
]

REDACTED = "[redacted]"

CREDENTIAL_KEYS = frozenset({
    "access_key", "access_key_id", "access_token", "api_key", "api_secret", "api_token",
    "apikey", "auth", "auth_token", "authorization", "aws_secret_access_key", "bearer",
    "bearer_token", "client_secret", "cookie", "credential", "credentials", "id_token",
    "passphrase", "passwd", "password", "private_key", "proxy_authorization",
    "refresh_token", "secret", "secret_access_key", "secret_key", "session_token",
    "set_cookie", "token", "x_api_key", "x_auth_token",
})
_HEADER_STYLE_SUFFIXES = ("-key", "-token", "-secret", "-password")
_SECRET_VALUE = re.compile(r"^(sk-|sk_|xox[abp]-|ghp_|github_pat_|AKIA|Bearer\s|Basic\s)")
# scheme://userinfo@host…: the userinfo is everything before the last '@' of the authority.
_URL_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)([^/?#\s]*)@")
_REFERENCE = re.compile(r"^secret:[A-Za-z0-9_.\-]{1,100}$")


def is_secret_key(key: str) -> bool:
    """Whether a config key or header name names a credential (the exact rule above)."""
    lowered = key.strip().lower()
    if lowered.replace("-", "_") in CREDENTIAL_KEYS:
        return True
    return "-" in lowered and lowered.endswith(_HEADER_STYLE_SUFFIXES)


def is_reference(value: Any) -> bool:
    """A well-formed secret reference, "secret:NAME"."""
    return isinstance(value, str) and _REFERENCE.match(value) is not None


def url_userinfo(value: str) -> str | None:
    """The userinfo of a URL-looking string (`https://user:pass@host/` -> "user:pass")."""
    found = _URL_USERINFO.match(value)
    return found.group(2) if found else None


def redact(value: Any) -> Any:
    """A deep copy of `value` with credential fields and credential-looking strings replaced.

    Under a credential key, anything but a reference, None or "" is replaced, whatever its
    type (a credential hidden in an object or a number is still a credential)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if is_secret_key(str(k)) and not is_reference(v) and v not in (None, ""):
                out[k] = REDACTED
            else:
                out[k] = redact(v)
        return out
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str):
        if _SECRET_VALUE.match(value):
            return REDACTED
        if url_userinfo(value) is not None:
            return _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", value, count=1)
    return value


def restore_redacted(new: Any, stored: Any) -> Any:
    """`new` with every `REDACTED` placeholder replaced by the value `stored` holds at the
    same path (a placeholder with nothing stored behind it stays, and is then refused or kept
    as the text it is). This is what lets a client send a config back exactly as a GET
    returned it without erasing what the redaction hid."""
    if isinstance(new, str) and REDACTED in new:
        if new == REDACTED:
            return stored if stored is not None else new
        if isinstance(stored, str) and redact(stored) == new:
            return stored  # a URL whose userinfo was redacted, unchanged otherwise
        return new
    if isinstance(new, dict):
        old = stored if isinstance(stored, dict) else {}
        return {k: restore_redacted(v, old.get(k)) for k, v in new.items()}
    if isinstance(new, list):
        old_list = stored if isinstance(stored, list) else []
        return [restore_redacted(v, old_list[i] if i < len(old_list) else None)
                for i, v in enumerate(new)]
    return new
