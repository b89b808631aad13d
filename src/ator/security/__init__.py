"""Security: secrets encryption, redaction, API key hashing (layer: security)."""
