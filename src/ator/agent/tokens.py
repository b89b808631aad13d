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
from collections import OrderedDict

from ator.providers.base import ModelRequest
from ator.usage import estimate_tokens

__all__ = ["request_bytes", "request_tokens"]


# The size of the last requests measured: compaction measures a request before the call and
# the inspector measures the one sent, which is most often the same object. Requests are
# frozen; an entry keeps its request alive, so the id cannot be reused while it is here.
_MEASURED: OrderedDict[int, tuple[ModelRequest, int]] = OrderedDict()
_MEASURED_MAX = 256


def request_bytes(request: ModelRequest) -> int:
    """Bytes of `request` serialized as JSON: system, tools (what the wire carries of them:
    name, description, schema) and every message."""
    seen = _MEASURED.get(id(request))
    if seen is not None and seen[0] is request:
        return seen[1]
    body = {
        "system": [b.text for b in request.system],
        "tools": [{"name": t.name, "description": t.description,
                   "input_schema": t.input_schema} for t in request.tools],
        "messages": request.messages,
    }
    size = len(json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                          default=str).encode())
    _MEASURED[id(request)] = (request, size)
    if len(_MEASURED) > _MEASURED_MAX:
        _MEASURED.popitem(last=False)
    return size


def request_tokens(request: ModelRequest) -> int:
    """The estimated input tokens of `request` (rounded up)."""
    return estimate_tokens(request_bytes(request))
