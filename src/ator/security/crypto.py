"""Secret encryption at rest: AES-256-GCM under a master key (layer: security; imports
cryptography, ator.errors).

The master key comes from settings (ATOR_MASTER_KEY, base64 of 32 bytes) or, for a
single-machine install with nothing configured, from a key file created with mode 0600 in
the data dir. Each secret gets a fresh 96-bit nonce; the org id and secret name are bound as
associated data, so a ciphertext copied to another org or name fails to decrypt.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ator.errors import ConfigError, SecretError

__all__ = ["MasterKey", "load_or_create_key_file"]


class MasterKey:
    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ConfigError("the master key must be 32 bytes (base64 of 32 random bytes)")
        self._aead = AESGCM(key)
        # A short public id so rows record which key encrypted them (for rotation).
        self.key_id = hashlib.sha256(b"ator-key-id" + key).hexdigest()[:12]

    @classmethod
    def from_b64(cls, text: str) -> MasterKey:
        try:
            return cls(base64.b64decode(text.strip(), validate=True))
        except (binascii.Error, ValueError) as exc:
            raise ConfigError("ATOR_MASTER_KEY is not valid base64") from exc

    def encrypt(self, plaintext: str, *, context: str) -> tuple[bytes, bytes]:
        nonce = os.urandom(12)
        return nonce, self._aead.encrypt(nonce, plaintext.encode(), context.encode())

    def decrypt(self, nonce: bytes, ciphertext: bytes, *, context: str) -> str:
        try:
            return self._aead.decrypt(nonce, ciphertext, context.encode()).decode()
        except InvalidTag as exc:
            raise SecretError("secret cannot be decrypted with this master key") from exc


def load_or_create_key_file(path: Path) -> MasterKey:
    """Read the key file, creating it (0600) with a random key if absent."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(base64.b64encode(secrets.token_bytes(32)).decode())
    return MasterKey.from_b64(path.read_text())
