"""What an upstream model API said when it failed, in words a tenant may read (layer: providers;
imports errors only).

A provider's error body is not ours to echo: a tenant-named endpoint can answer anything (an
internal service's error page, a reflected header, a key). Adapters take only the two fields the
vendor's JSON error envelope defines - the error type and the message - and pass them through
`describe`, which bounds the text, drops control characters and blanks anything that looks like a
credential. The raw body goes only to the server log, at debug level (`log_raw`).

Shapes are not enough: a self-hosted server's key can be any string, and servers echo it
("account <key> is not enabled"). So each adapter hands `describe` and `log_raw` the exact
credentials its client sends (`sent`: the process key or the org's secret, whichever the
registry gave it), and they are removed first, before any other rule or the length bound
could leave a piece of one: every run of 8 or more characters of a sent credential (all of a
shorter one, from 4 characters) becomes `[redacted]`.
"""

from __future__ import annotations

import base64
import logging
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from ator.errors import AtorError, ProviderError
from ator.net.guard import egress_refusal

__all__ = [
    "MAX_MESSAGE_CHARS",
    "Sent",
    "connection_error",
    "describe",
    "error_fields",
    "log_raw",
    "sanitize",
    "scrub_sent",
    "sent_credentials",
]

#: The credentials a client sends (None where it sends none), for errors to leave out.
Sent = Iterable[str | None]

#: The longest provider message a tenant sees (the rest is cut with an ellipsis).
MAX_MESSAGE_CHARS: Final = 300
_MAX_RAW_LOG_CHARS: Final = 4000

log = logging.getLogger("ator.providers")

# An error type is an identifier (`rate_limit_error`, `invalid_request_error`); anything else is
# not a type but something the server made up, and is not repeated.
_ERROR_TYPE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_REDACTED: Final = "[redacted]"
_MIN_SENT: Final = 4  # a shorter "credential" cannot be told from ordinary text
_SENT_RUN: Final = 8  # runs of a credential this long (or all of a shorter one) are removed
_CREDENTIALS: Final = (
    # Vendor key shapes: sk-..., sk-ant-..., sk-proj-..., xai-..., AIza..., AKIA...
    re.compile(r"\b(?:sk|pk|rk|xai|gsk|hf|ghp|gho|glpat|xox[abpr])[-_][A-Za-z0-9_\-*.]{6,}"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{20,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{12,}"),
    # JWTs and other bearer material.
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}(?:\.[A-Za-z0-9_\-]*){0,2}"),
    re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9_\-.~+/=*]{8,}"),
    # key=value / key: value for credential-named keys.
    re.compile(
        r"(?i)\b((?:api[_-]?key|x-api-key|access[_-]?token|auth[_-]?token|secret|password"
        r"|passwd|authorization|cookie|session)[\"']?\s*[:=]\s*)[\"']?[^\s\"',;&]{3,}"
    ),
    # Userinfo in URLs: scheme://user:pass@host
    re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@:]+:[^/\s@]+@"),
    # Long unbroken runs of key-like characters mixing letters and digits (hex or base64 keys).
    re.compile(r"\b(?=[A-Za-z0-9_\-+/]*\d)(?=[A-Za-z0-9_\-+/]*[A-Za-z])[A-Za-z0-9_\-+/]{32,}={0,2}"),
)


def sent_credentials(base_url: str | None, *credentials: str | None) -> tuple[str, ...]:
    """What a client built with these arguments sends as credentials: the given ones, and the
    user info of `base_url` (an operator's endpoint may carry it: the HTTP client then sends
    it as Basic auth), as user, password and the Basic token."""
    found = [c for c in credentials if c]
    parts = urlsplit(base_url) if base_url else None
    if parts is not None and (parts.username or parts.password):
        user, password = unquote(parts.username or ""), unquote(parts.password or "")
        basic = base64.b64encode(f"{user}:{password}".encode()).decode()
        found += [user, password, basic]
    return tuple(found)


def scrub_sent(text: str, sent: Sent) -> str:
    """`text` with every piece of the credentials in `sent` replaced by `[redacted]`: each
    run of `_SENT_RUN` or more characters found in one (all of one shorter than that)."""
    spans: list[tuple[int, int]] = []
    for secret in sent:
        if not secret or len(secret) < _MIN_SENT:
            continue
        run = min(len(secret), _SENT_RUN)
        # Every window of the credential: a run of it in the text is a union of these.
        for gram in {secret[i:i + run] for i in range(len(secret) - run + 1)}:
            at = text.find(gram)
            while at != -1:
                spans.append((at, at + run))
                at = text.find(gram, at + 1)
    if not spans:
        return text
    spans.sort()
    merged = [spans[0]]
    for start, end in spans[1:]:
        if start <= merged[-1][1]:  # touches the span before it: one credential
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    pieces, cursor = [], 0
    for start, end in merged:
        pieces += [text[cursor:start], _REDACTED]
        cursor = end
    return "".join([*pieces, text[cursor:]])


def sanitize(text: str, *, limit: int = MAX_MESSAGE_CHARS, sent: Sent = ()
             ) -> str:
    """`text` fit for a tenant: the credentials in `sent` removed (`scrub_sent`), control and
    format characters become spaces, whitespace runs collapse, credential-looking strings
    become `[redacted]`, and at most `limit` characters remain (cut with `…`)."""
    # Bound the work before the regexes run: a hostile body can be megabytes. (A credential
    # across the first cut is removed whole: the cut falls after the scrub.)
    text = scrub_sent(text[: limit * 4 + 512], sent)[: limit * 4]
    text = "".join(
        " " if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch for ch in text
    )
    text = " ".join(text.split())
    for pattern in _CREDENTIALS:
        text = pattern.sub(_keep_prefix, text)
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


def _keep_prefix(match: re.Match[str]) -> str:
    # Patterns with a group keep it ("api_key=" / "Bearer " / "https://"), so the reader still
    # sees what was there.
    prefix = match.group(1) if match.re.groups else ""
    if prefix and not prefix.endswith(("=", ":", "//", " ")):
        prefix += " "
    return f"{prefix}{_REDACTED}"


def error_fields(body: Any) -> tuple[str | None, str | None]:
    """(type, message) from a vendor JSON error envelope, each None when absent or not text.

    Understands `{"error": {"type", "message"}}` (Anthropic, OpenAI and most compatible
    servers), `{"type", "message"}` (an unwrapped error object, as the OpenAI SDK hands it
    over) and `{"error": "text"}` (Ollama, llama.cpp). Anything else yields (None, None): a body
    that is not an error envelope is never repeated.
    """
    if not isinstance(body, Mapping):
        return None, None
    inner = body.get("error", body)
    if isinstance(inner, str):
        return None, inner
    if not isinstance(inner, Mapping):
        return None, None
    kind = inner.get("type")
    message = inner.get("message")
    return (
        kind if isinstance(kind, str) and _ERROR_TYPE.fullmatch(kind) else None,
        message if isinstance(message, str) else None,
    )


def describe(vendor: str, status: int | None, error_type: str | None, message: str | None,
             *, sent: Sent = ()) -> str:
    """The one-line error a tenant reads: `vendor: status type: message`, sanitized, with
    nothing left of the credentials in `sent` (what the client sent on this call)."""
    head = f"{vendor}:"
    if status is not None:
        head += f" {status}"
    clean_type = error_type if error_type and _ERROR_TYPE.fullmatch(error_type) else "error"
    text = sanitize(message, sent=sent) if message else ""
    return f"{head} {clean_type}: {text}" if text else f"{head} {clean_type}"


def log_raw(vendor: str, status: int | None, raw: object,
            *, sent: Sent = ()) -> None:
    """Keep the upstream answer for the operator: debug level, server log only, without the
    credentials in `sent` (an org's secret is not the operator's to read either)."""
    if log.isEnabledFor(logging.DEBUG):
        text = scrub_sent(str(raw)[: _MAX_RAW_LOG_CHARS + 512], sent)
        log.debug("%s error body (status %s): %.*s", vendor, status, _MAX_RAW_LOG_CHARS, text)


def connection_error(vendor: str, exc: BaseException) -> ProviderError:
    """A request that got no answer. The transport's own words (addresses, resolver output) are
    not repeated; but an error of ours in the cause chain - the egress guard refusing a
    destination, raised inside the transport - keeps its message and code, and is final."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, AtorError) and not isinstance(cause, ProviderError):
            error = ProviderError(f"{vendor}: {cause.message}", kind="network")
            error.code = cause.code
            return error
        cause = cause.__cause__ or cause.__context__
    return ProviderError(f"{vendor}: connection failed", kind="network", retryable=True)


def ours(vendor: str, exc: BaseException) -> AtorError | None:
    """An error ator raised itself that reached an adapter through the SDK: the egress
    guard's refusal stays typed (never retried as "network"), a ProviderError passes as it is,
    another error of ours becomes a final connection error keeping its words. None: the
    SDK's own exception, for the adapter to map."""
    if (refused := egress_refusal(exc)) is not None:
        return refused
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, AtorError):
        return connection_error(vendor, exc)
    return None
