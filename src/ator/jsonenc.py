"""Encoding JSON on the hot path (layer: bottom; imports orjson).

What a turn writes and announces is JSON: event data, the inspector's record of each call,
the config snapshot, coordinator notices and token deltas. The standard library's encoder
was a seventh of a turn's CPU; orjson (C, Rust) does the same work several times faster.
These helpers keep the standard library's meaning where it matters here: anything orjson does
not know natively (and datetimes and dataclasses, which it would otherwise render its own
way) goes through `str`, like `json.dumps(..., default=str)`; non-string keys become
strings; an integer beyond 64 bits, which orjson refuses, falls back to the standard
library. Output is compact and UTF-8 (no `\\uXXXX` escapes): the same JSON values.

It is the one encoder of the process: what the engine writes, what the SSE endpoint and the
socket gateway send, and FastAPI's JSON responses (api.responses) all go through it, and
`loads` is its decoder (orjson's, for the same speed on the reading side).
"""

from __future__ import annotations

import json
from typing import Any, Final

import orjson

__all__ = ["canonical", "dumps", "encode", "loads", "size"]

_OPTIONS: Final = (orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
                   | orjson.OPT_NON_STR_KEYS)


def _encode(value: Any, options: int) -> bytes:
    try:
        return orjson.dumps(value, default=str, option=options)
    except orjson.JSONEncodeError:  # e.g. an integer beyond 64 bits
        return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"),
                          sort_keys=bool(options & orjson.OPT_SORT_KEYS)).encode()


def dumps(value: Any) -> str:
    """Compact JSON text of `value`."""
    return _encode(value, _OPTIONS).decode()


def encode(value: Any) -> bytes:
    """Compact JSON of `value` as UTF-8 bytes (what a response body or a socket packet sends)."""
    return _encode(value, _OPTIONS)


# orjson reads an integer beyond 64 bits as a float, losing digits, and refuses a lone
# surrogate escape; the standard library keeps both. Such text is rare, so it is spotted by a
# run of 20 digits (where a number past 64 bits has to be) or by orjson's refusal, and read the
# standard library's way. The run is found by mapping every digit to "0" and looking for 20 of
# them: a C pass over the bytes, under half of orjson's own time (a regex took five times it).
_DIGITS_AS_ZERO: Final = bytes.maketrans(b"123456789", b"000000000")
_TWENTY_DIGITS: Final = b"0" * 20


def loads(text: str | bytes) -> Any:
    """The value of JSON text, as the standard library reads it (raises ValueError)."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if _TWENTY_DIGITS not in raw.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def canonical(value: Any) -> bytes:
    """Compact JSON with sorted keys, as UTF-8: for hashing."""
    return _encode(value, _OPTIONS | orjson.OPT_SORT_KEYS)


def size(value: Any) -> int:
    """Bytes of `value` as compact UTF-8 JSON."""
    return len(_encode(value, _OPTIONS))
