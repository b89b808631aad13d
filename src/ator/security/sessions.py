"""Console session tokens and their CSRF tokens (layer: security; imports nothing of ator).

A session token is `ators_<secret>` (256 bits): it lives only in an HttpOnly cookie and,
hashed with SHA-256, in the `sessions` table. Its CSRF token is derived from it (a keyed
digest), so nothing more is stored: the console holds the CSRF token in memory and sends it
with every cookie-authenticated write; a page on another site can read neither.

The cookie is `__Host-ator_session` over https (the prefix makes the browser refuse it unless
it is Secure, Path=/ and set by this very host, so a sibling subdomain cannot plant one) and
`ator_session` over plain http (localhost development, where Secure cookies are not kept).
Only a session token is read from it (`session_from_cookies`): an API key placed in the cookie
authenticates nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

__all__ = [
    "CSRF_HEADER",
    "SECURE_SESSION_COOKIE",
    "SESSION_COOKIE",
    "csrf_token",
    "csrf_valid",
    "hash_session",
    "is_session_token",
    "new_session_token",
    "session_cookie_name",
    "session_from_cookies",
]

_SCHEME = "ators_"
SESSION_COOKIE = "ator_session"
SECURE_SESSION_COOKIE = "__Host-ator_session"
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


def session_cookie_name(https: bool) -> str:
    """The session cookie's name for a request that came over https or not."""
    return SECURE_SESSION_COOKIE if https else SESSION_COOKIE


def session_from_cookies(cookies: Mapping[str, str], *, https: bool) -> str | None:
    """The session token in a request's cookies, or None: the cookie of the request's scheme
    only, and only when it holds a session token (never an API key)."""
    token = cookies.get(session_cookie_name(https))
    return token if token and is_session_token(token) else None
