"""Estimating a request's size in tokens from its bytes (layer: providers; imports
providers.base, jsonenc, memo, usage).

One constant (`ator.usage.CHARS_PER_TOKEN`), shared by everything that estimates (the
budget's worst case, compaction, a cut-short call's output): tokens ≈ bytes of the serialized
request ÷ that constant, counting the system prompt, the tool schemas and every message,
tool-use inputs and tool results included. Byte-level BPE tokenizers never produce more
tokens than bytes, so `bytes` itself is a hard upper bound; ÷4 is what English text and JSON
average. The loop's hooks (budget, compaction), the inspector and the adapters' estimate for a
call cut short all measure with it, and a request is measured once, whoever asks first.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

from ator import jsonenc
from ator.memo import ByIdentity
from ator.providers.base import ModelRequest, ToolSpec
from ator.usage import estimate_tokens

__all__ = ["request_bytes", "request_tokens"]


# The size of each request still alive: compaction measures a request before the call and
# the inspector measures the one sent, most often the same object. An entry goes with its
# request (a weak reference), so nothing is kept alive and an id is never taken for another.
_MEASURED: dict[int, tuple[weakref.ref[ModelRequest], int]] = {}


def request_bytes(request: ModelRequest) -> int:
    """Bytes of `request` serialized as JSON: system, tools (what the wire carries of them:
    name, description, schema) and every message."""
    seen = _MEASURED.get(id(request))
    if seen is not None and seen[0]() is request:
        return seen[1]
    # The bytes of {"system":[…],"tools":[…],"messages":[…]}, summed by part: with these
    # separators JSON composes, so the sum is exactly the whole document's size, and each
    # tool's part is measured once per spec (the same objects call after call).
    tools = request.tools
    size = (len('{"system":,"tools":[],"messages":}')
            + jsonenc.size([b.text for b in request.system])
            + _TOOLS.of_all(tools, _tools_bytes)
            + jsonenc.size(request.messages))
    key = id(request)

    def forget(ref: weakref.ref[ModelRequest]) -> None:
        if _MEASURED.get(key, (None, 0))[0] is ref:
            del _MEASURED[key]

    _MEASURED[key] = (weakref.ref(request, forget), size)
    return size


_TOOLS: ByIdentity[ToolSpec, int] = ByIdentity(4096)


def _tool_bytes(spec: ToolSpec) -> int:
    """What the wire carries of a tool (name, description, schema), in bytes; once per spec."""
    return _TOOLS.get(spec, lambda s: jsonenc.size(
        {"name": s.name, "description": s.description, "input_schema": s.input_schema}))


def _tools_bytes(tools: Sequence[ToolSpec]) -> int:
    """The tools array's members and the commas between them; once per list of specs."""
    return sum(_tool_bytes(t) for t in tools) + max(0, len(tools) - 1)


def request_tokens(request: ModelRequest) -> int:
    """The estimated input tokens of `request` (rounded up)."""
    return estimate_tokens(request_bytes(request))
