"""API key format and hashing (layer: security; imports nothing of ator).

A key is `ator_<prefix>_<secret>`: the 8-character prefix is stored in clear so people can
tell keys apart, the whole key only as a SHA-256 digest. Keys are 190+ bits of randomness,
so a fast hash is enough: there is nothing to brute-force.
"""

from __future__ import annotations

import hashlib
import secrets

__all__ = ["hash_key", "new_key", "parse_prefix"]

_SCHEME = "ator"


def new_key() -> tuple[str, str]:
    """A fresh key and its public prefix."""
    prefix = secrets.token_hex(4)
    return f"{_SCHEME}_{prefix}_{secrets.token_urlsafe(24)}", prefix


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def parse_prefix(key: str) -> str | None:
    parts = key.split("_", 2)
    if len(parts) != 3 or parts[0] != _SCHEME or len(parts[1]) != 8:
        return None
    return parts[1]

