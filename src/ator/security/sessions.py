"""Console session tokens and their CSRF tokens (layer: security; imports nothing of ator).

A session token is `ators_<secret>` (256 bits): it lives only in an HttpOnly cookie and,
hashed with SHA-256, in the `sessions` table. Its CSRF token is derived from it (a keyed
digest), so nothing more is stored: the console holds the CSRF token in memory and sends it
with every cookie-authenticated write; a page on another site can read neither.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

__all__ = [
    "CSRF_HEADER",
    "SESSION_COOKIE",
    "csrf_token",
    "csrf_valid",
    "hash_session",
    "is_session_token",
    "new_session_token",
]

_SCHEME = "ators_"
SESSION_COOKIE = "ator_session"
CSRF_HEADER = "x-csrf-token"  # a custom header: another site's form or fetch cannot send it


def new_session_token() -> str:
    return _SCHEME + secrets.token_urlsafe(32)


def is_session_token(token: str) -> bool:
    return token.startswith(_SCHEME) and 20 <= len(token) <= 100


def hash_session(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def csrf_token(token: str) -> str:
    """The CSRF token that goes with a session (not the session token's hash)."""
    return hmac.new(token.encode(), b"ator-csrf", hashlib.sha256).hexdigest()


def csrf_valid(token: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(csrf_token(token).encode(),
                                                     given.encode())
