"""Estimating a request's size in tokens from its bytes (layer: agent; imports
providers.base, usage).

One constant (`ator.usage.CHARS_PER_TOKEN`), shared by everything that estimates (the
budget's worst case, compaction, a cut-short call's output): tokens ≈ bytes of the serialized
request ÷ that constant, counting the system prompt, the tool schemas and every message,
tool-use inputs and tool results included. Byte-level BPE tokenizers never produce more
tokens than bytes, so `bytes` itself is a hard upper bound; ÷4 is what English text and JSON
average.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from ator.providers.base import ModelRequest
from ator.usage import estimate_tokens

__all__ = ["request_bytes", "request_tokens"]


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
    return estimate_tokens(request_bytes(request))
