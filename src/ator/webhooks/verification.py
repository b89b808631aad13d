"""How an inbound endpoint knows a request is from its sender (layer: webhooks; imports
ator.errors, ator.webhooks.signing and the stdlib).

An endpoint's `verification` is data, one of:

- `{"method": "standard_webhooks"}` (the default): `webhook-id`, `webhook-timestamp` within
  the tolerance, and a `v1,` signature over `id.timestamp.body` (`signing.verify`); the
  webhook id is `webhook-id`.
- `{"method": "hmac", "header": "x-hub-signature-256", "algorithm": "sha256",
  "encoding": "hex" | "base64", "prefix": "sha256=", "id_header": "x-github-delivery"}`: a
  provider-style HMAC of the raw body keyed by the secret's UTF-8 bytes (GitHub, Shopify,
  Stripe-less providers), in one header, optionally prefixed.
- `{"method": "token"}`: a random secret token in the path, `/v1/hooks/{id}/{token}`, for
  senders that cannot sign at all.

For `hmac` and `token` the webhook id (what dedup is by) is the `id_header`'s value when the
endpoint names one and the request carries it, else `sha256:` + the body's hex digest, so
a sender's retry of the same body is stored once. Every failure is `BadSignature` (401); a
token in the path of an endpoint that signs (or none for one that wants it) fails too.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from typing import Any

from ator.errors import ValidationFailed
from ator.webhooks.signing import PREFIX, BadSignature, new_secret, verify

__all__ = ["METHODS", "check_verification", "new_inbound_secret", "request_id",
           "verify_request"]

METHODS = ("standard_webhooks", "hmac", "token")
_ALGORITHMS = ("sha256", "sha512")
_HEADER = re.compile(r"^[A-Za-z0-9-]{1,100}$")


def _invalid(message: str) -> ValidationFailed:
    return ValidationFailed(message, code="webhook_verification_invalid")


def check_verification(raw: Any) -> dict[str, Any]:
    """A verification as stored (header names lower-cased). Raises ValidationFailed (422
    `webhook_verification_invalid`)."""
    if raw is None:
        return {"method": "standard_webhooks"}
    if not isinstance(raw, dict) or raw.get("method") not in METHODS:
        raise _invalid(f"a verification is an object whose method is one of {list(METHODS)}")
    method = raw["method"]
    allowed = {"standard_webhooks": {"method"}, "token": {"method", "id_header"},
               "hmac": {"method", "header", "algorithm", "encoding", "prefix", "id_header"}}
    unknown = sorted(set(raw) - allowed[method])
    if unknown:
        raise _invalid(f"unknown fields for {method}: {unknown}")
    out: dict[str, Any] = {"method": method}
    for name in ("header", "id_header"):
        if name in raw:
            if not isinstance(raw[name], str) or not _HEADER.match(raw[name]):
                raise _invalid(f"{name} is a header name (letters, digits, dashes)")
            out[name] = raw[name].lower()
    if method == "hmac":
        if "header" not in out:
            raise _invalid("an hmac verification names the header that carries the signature")
        out["algorithm"] = raw.get("algorithm", "sha256")
        out["encoding"] = raw.get("encoding", "hex")
        out["prefix"] = raw.get("prefix", "")
        if out["algorithm"] not in _ALGORITHMS:
            raise _invalid(f"algorithm is one of {list(_ALGORITHMS)}")
        if out["encoding"] not in ("hex", "base64"):
            raise _invalid("encoding is hex or base64")
        if not isinstance(out["prefix"], str) or len(out["prefix"]) > 32:
            raise _invalid("prefix is a string of at most 32 characters")
    return out


def new_inbound_secret(verification: Mapping[str, Any], given: str | None) -> str:
    """The endpoint's secret: the sender's own when it made one (hmac, standard webhooks),
    else a new one. Raises ValidationFailed for a given secret the method cannot use."""
    method = verification["method"]
    if given is None:
        if method == "standard_webhooks":
            return new_secret()
        return secrets.token_hex(32) if method == "hmac" else secrets.token_urlsafe(32)
    if method == "token":
        raise _invalid("a token is made by ator; it cannot be given")
    if method == "standard_webhooks":
        try:
            key = base64.b64decode(given.removeprefix(PREFIX), validate=True)
        except (binascii.Error, ValueError):
            key = b""
        if not given.startswith(PREFIX) or not 24 <= len(key) <= 64:
            raise _invalid("a Standard Webhooks secret is whsec_ + base64 of 24 to 64 bytes")
    elif not 16 <= len(given) <= 512:
        raise _invalid("an hmac secret has 16 to 512 characters")
    return given


def request_id(verification: Mapping[str, Any], headers: Mapping[str, str], body: bytes) -> str:
    """What a verified request is deduplicated by (module docstring)."""
    named = verification.get("id_header")
    if named and headers.get(named):
        return headers[named][:200]
    return "sha256:" + hashlib.sha256(body).hexdigest()


def verify_request(verification: Mapping[str, Any], secret: str, headers: Mapping[str, str],
                   body: bytes, *, token: str | None, now: float, tolerance: float) -> str:
    """Check one request (headers lower-cased); returns its webhook id. Raises
    BadSignature."""
    method = verification["method"]
    if method == "token":
        if token is None or not hmac.compare_digest(token.encode(), secret.encode()):
            raise BadSignature("the token in the path does not match")
        return request_id(verification, headers, body)
    if token is not None:
        raise BadSignature("this endpoint takes signed requests, not a token in the path")
    if method == "standard_webhooks":
        return verify(secret, headers, body, now=now, tolerance=tolerance)
    given = headers.get(verification["header"], "")
    prefix = verification.get("prefix", "")
    if not given or not given.startswith(prefix):
        raise BadSignature(f"missing or malformed {verification['header']}")
    digest = hmac.new(secret.encode(), body, verification["algorithm"]).digest()
    if verification["encoding"] == "hex":
        expected, got = digest.hex(), given[len(prefix):].strip().lower()
    else:
        expected, got = base64.b64encode(digest).decode(), given[len(prefix):].strip()
    if not hmac.compare_digest(expected.encode(), got.encode()):
        raise BadSignature(f"{verification['header']} does not match the body")
    return request_id(verification, headers, body)
