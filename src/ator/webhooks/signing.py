"""Standard Webhooks 1.0 signatures (layer: webhooks; imports ator.errors and the stdlib).

A secret is `whsec_` + base64 of 32 random bytes. A signature is `v1,` + base64 of
HMAC-SHA256(key, f"{id}.{timestamp}.{body}") over the exact bytes sent; a header may carry
several, space-separated (a key rotation). This matches the `standardwebhooks` library byte
for byte (the tests verify every delivery with it).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Mapping

from ator.errors import AtorError

__all__ = ["BadSignature", "new_secret", "sign", "verify"]

PREFIX = "whsec_"


class BadSignature(AtorError):
    """An inbound request whose Standard Webhooks headers do not verify (401)."""

    kind = "auth"
    code = "webhook_signature_invalid"
    status = 401


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(PREFIX))


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` value (`v1,<base64>`) of one message."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify(secret: str, headers: Mapping[str, str], body: bytes, *, now: float,
           tolerance: float) -> str:
    """Check a request's `webhook-id`, `webhook-timestamp` and `webhook-signature`; returns
    the webhook id. Raises BadSignature (missing headers, a timestamp outside `tolerance`
    seconds of `now`, or no `v1` signature that matches)."""
    msg_id = headers.get("webhook-id", "")
    stamp = headers.get("webhook-timestamp", "")
    given = headers.get("webhook-signature", "")
    if not msg_id or not stamp or not given:
        raise BadSignature("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        timestamp = int(stamp)
    except ValueError:
        raise BadSignature("webhook-timestamp is not a unix time") from None
    if abs(now - timestamp) > tolerance:
        raise BadSignature("webhook-timestamp is too far from now")
    expected = sign(secret, msg_id, timestamp, body)
    if not any(hmac.compare_digest(expected, sig) for sig in given.split(" ")
               if sig.startswith("v1,")):
        raise BadSignature("no webhook-signature matches")
    return msg_id
