"""What a model call was sent, as the inspector records it, and how two calls differ
(layer: agent; imports jsonenc, memo, providers.base, providers.breakpoints, providers.size,
usage).

`describe` runs before every call (the loop stores the result with the call, in
`model_calls.request_meta`, written by the step's own statement). It records hashes of each
part of the provider's cached prefix — each tool, each system layer, a chained hash per
message — so `diff` can later say which part changed between two calls of a thread and so
which one broke the prompt cache. Prefix order is the providers' (Anthropic's): tools, then
system, then messages; a change breaks the cache for everything after it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from ator import jsonenc
from ator.memo import ByIdentity
from ator.providers.base import ModelRequest, ToolSpec
from ator.providers.breakpoints import plan_breakpoints
from ator.providers.size import request_bytes
from ator.usage import estimate_tokens

__all__ = ["describe", "diff"]


def _hash(value: Any) -> str:
    raw = value.encode() if isinstance(value, str) else jsonenc.canonical(value)
    return hashlib.sha256(raw).hexdigest()[:16]


# A turn's tool specs are the same objects call after call (toolsets keep them): their
# records are kept by spec, so a call hashes only what is new.
_TOOLS: ByIdentity[ToolSpec, dict[str, Any]] = ByIdentity(1024)


def _record(spec: ToolSpec) -> dict[str, Any]:
    wire = jsonenc.canonical({"name": spec.name, "description": spec.description,
                              "input_schema": spec.input_schema})
    # Sorted or not, compact JSON has the same length: one encoding gives size and hash.
    return {"name": spec.name, "origin": spec.origin, "on_demand": spec.on_demand,
            "chars": len(wire), "hash": hashlib.sha256(wire).hexdigest()[:16]}


def _records(specs: Sequence[ToolSpec]) -> tuple[tuple[dict[str, Any], ...], str]:
    """The records of a request's tools and the hash of the tools' prefix; once per list."""
    records = tuple(_TOOLS.get(spec, _record) for spec in specs)
    return records, _hash([r["hash"] for r in records])


_TOOL_LISTS: ByIdentity[ToolSpec, tuple[tuple[dict[str, Any], ...], str]] = ByIdentity(256)


def describe(request: ModelRequest, layers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The inspector's record of `request` (whose system blocks are `layers`)."""
    records, tools_hash = _TOOL_LISTS.of_all(request.tools, _records)
    tools = [dict(r) for r in records]
    chain: list[str] = []
    previous = ""
    for message in request.messages:
        wire = {"role": message.get("role"), "content": message.get("content")}
        previous = _hash(previous + _hash(wire))[:12]
        chain.append(previous)
    # The same measure compaction applies (providers/size.py), so the two never disagree.
    size = request_bytes(request)
    plan = plan_breakpoints([b.cache for b in request.system], len(request.tools),
                            request.messages) if request.cache else []
    return {
        "model": request.model,
        "layers": list(layers),
        "tools": tools,
        "prefix": {"tools": tools_hash,
                   "system": _hash([layer.get("hash") for layer in layers])},
        "messages": {"count": len(chain), "chain": chain},
        "breakpoints": [p.label for p in plan],
        "request_bytes": size,
        "estimated_tokens": estimate_tokens(size),
    }


def diff(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> dict[str, Any]:
    """What changed from the call `before` to the call `after`. `cache_broken_by` names the
    parts of the cached prefix that changed, in prefix order (the first one is where the
    cache broke); `changed` lists everything that differs, prefix or not."""
    if before is None:
        return {"cache_broken_by": [], "changed": []}
    broken: list[str] = []
    if before.get("model") != after.get("model"):
        broken.append("model")
    old_tools = {t["name"]: t.get("hash") for t in before.get("tools", [])}
    new_tools = {t["name"]: t.get("hash") for t in after.get("tools", [])}
    if list(old_tools) != list(new_tools) or old_tools != new_tools:
        names = sorted(set(old_tools) | set(new_tools))
        touched = [n for n in names if old_tools.get(n) != new_tools.get(n)]
        broken.extend(f"tool:{n}" for n in touched)
        if not touched:
            broken.append("tools:order")
    old_layers = {str(x["name"]): x.get("hash") for x in before.get("layers", [])}
    for layer in after.get("layers", []):
        if old_layers.pop(str(layer["name"]), None) != layer.get("hash"):
            broken.append(f"layer:{layer['name']}")
    broken.extend(f"layer:{name}" for name in old_layers)  # dropped since
    old_chain = before.get("messages", {}).get("chain", [])
    new_chain = after.get("messages", {}).get("chain", [])
    if old_chain and (len(new_chain) < len(old_chain)
                      or new_chain[len(old_chain) - 1] != old_chain[-1]):
        broken.append("messages")  # history rewritten (compaction), not only extended
    changed = list(broken)
    if before.get("config_hash") != after.get("config_hash"):
        changed.append("config_hash")
    # Which parts carry breakpoints, not where: the latest user message moves every call.
    if _parts(before) != _parts(after):
        changed.append("breakpoints")
    return {"cache_broken_by": broken, "changed": changed}


def _parts(meta: Mapping[str, Any]) -> list[str]:
    return [str(b).split(":", 1)[0] for b in meta.get("breakpoints", [])]
