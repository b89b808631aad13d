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

A URL carries a credential (`url_credential`) when it has userinfo or a query (or fragment)
parameter whose name is a credential name (`is_credential_param`: the credential keys above,
`key`, `sig`, `signature`, a name ending in `_key`/`_token`/`_secret`/`_password`/
`_signature`, camelCase read as snake_case). That one rule refuses such URLs where tenants
write them (a setup's `base_url`, an MCP server's `url`), redacts them in what is shown
(`redact`) and scrubs them out of log lines (`scrub_urls`, used by `obs.logging`).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = [
    "CREDENTIAL_KEYS",
    "REDACTED",
    "is_credential_param",
    "is_reference",
    "is_secret_key",
    "redact",
    "restore_redacted",
    "scrub_urls",
    "url_credential",
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
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_REFERENCE = re.compile(r"^secret:[A-Za-z0-9_.\-]{1,100}$")
# Query parameter names that carry a credential besides CREDENTIAL_KEYS (Google's `key`,
# Azure SAS `sig`, signed-URL signatures and credentials).
_CREDENTIAL_PARAMS = CREDENTIAL_KEYS | {
    "key", "sig", "signature", "pass", "pwd", "jwt", "sessionid", "session_id",
    "x_amz_credential", "x_amz_security_token", "x_goog_credential",
}
_CREDENTIAL_PARAM_SUFFIXES = ("_key", "_token", "_secret", "_password", "_signature")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# In free text: the userinfo of any scheme://userinfo@ and the value of any name=value that
# follows ?, & or ; (a URL's query, also a bare path's as in an access log line).
_TEXT_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)[^/?#\s\"'<>]+@")
_TEXT_PARAM = re.compile(r"([?&;#]([A-Za-z0-9_.%\-]{1,100})=)([^&;#\s\"'<>]*)")
# An inbound webhook's token is the last segment of its path (`/v1/hooks/{id}/{token}`).
_HOOK_TOKEN = re.compile(r"(/v1/hooks/[0-9A-Fa-f-]{36}/)[^/?#\s\"'<>]+")


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


def is_credential_param(name: str) -> bool:
    """Whether a URL query parameter's name says it carries a credential (`api_key`, `key`,
    `token`, `access_token`, `sig`, `X-Amz-Signature`, `apiKey`, `private_token` …)."""
    lowered = _CAMEL.sub("_", name.strip()).lower().replace("-", "_")
    return lowered in _CREDENTIAL_PARAMS or lowered.endswith(_CREDENTIAL_PARAM_SUFFIXES)


def url_credential(value: str) -> str | None:
    """What credential a URL-looking string carries, in words ("user info (user:password@)",
    "the query parameter 'api_key'", "the fragment parameter 'access_token'"), or None when
    it carries none (or is not a URL)."""
    if url_userinfo(value) is not None:
        return "user info (user:password@)"
    if _URL_SCHEME.match(value) is None:
        return None
    try:
        parts = urlsplit(value)
    except ValueError:  # not a URL after all (an unbalanced IPv6 bracket)
        return None
    # The fragment too: `#access_token=…` is how OAuth's implicit flow hands a token over.
    for where, text in (("query", parts.query), ("fragment", parts.fragment)):
        for name, _ in parse_qsl(text, keep_blank_values=True):
            if is_credential_param(name):
                return f"the {where} parameter {name!r}"
    return None


def scrub_urls(text: str) -> str:
    """`text` (a log line) with the userinfo of every URL, the value of every
    credential-named query parameter and an inbound webhook's path token replaced by
    `[redacted]`."""
    if "@" in text:
        text = _TEXT_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    if "/v1/hooks/" in text:
        text = _HOOK_TOKEN.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    if "=" in text:
        text = _TEXT_PARAM.sub(
            lambda m: f"{m.group(1)}{REDACTED}"
            if m.group(3) and is_credential_param(unquote(m.group(2))) else m.group(0), text)
    return text


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
        if url_credential(value) is not None:
            return scrub_urls(value)
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
