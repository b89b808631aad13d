"""Estimating a request's size in tokens from its bytes (layer: agent; imports
providers.base).

One constant, shared by everything that estimates (the budget's worst case, compaction):
tokens ≈ bytes of the serialized request ÷ BYTES_PER_TOKEN, counting the system prompt, the
tool schemas and every message, tool-use inputs and tool results included. Byte-level BPE
tokenizers never produce more tokens than bytes, so `bytes` itself is a hard upper bound;
the ÷4 estimate is what English text and JSON average.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from ator.providers.base import ModelRequest

__all__ = ["BYTES_PER_TOKEN", "request_bytes", "request_tokens"]

BYTES_PER_TOKEN = 4


def request_bytes(request: ModelRequest) -> int:
    body = {
        "system": [b.text for b in request.system],
        "tools": [asdict(t) for t in request.tools],
        "messages": request.messages,
    }
    return len(json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                          default=str).encode())


def request_tokens(request: ModelRequest) -> int:
    """The estimated input tokens of `request` (rounded up)."""
    return -(-request_bytes(request) // BYTES_PER_TOKEN)
