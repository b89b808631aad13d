"""Freezing a turn's effective configuration (layer: engine; imports agent, jsonenc,
security, store).

At turn start the setup, thread instructions, caps and mounted tools are frozen into a
snapshot stored with the turn. The snapshot is redacted (secret references stay, anything
secret-looking goes) and hashed, so two turns with the same hash ran under the same config.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ator import jsonenc
from ator.agent.caps import CapCeilings, CapGroup, Caps, parse_caps
from ator.security.redact import redact
from ator.store.turns import TurnStart

__all__ = ["FrozenConfig", "freeze"]


@dataclass(frozen=True, slots=True)
class FrozenConfig:
    caps: Caps
    snapshot: dict[str, Any]
    hash: str
    allow: list[str] | None
    deny: list[str]
    cache: bool
    # Allow lists the turn's tools must match besides `allow` (bounds set above the thread).
    within: tuple[tuple[str, ...], ...] = ()
    # The extensions' caps (`CapGroup`), by kind.
    extra_caps: Mapping[type[Any], Any] = field(default_factory=dict)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# Turns of a thread (and threads of a setup) freeze the same inputs again and again: the last
# results are kept by everything the snapshot is made of. A setup's config, tool policy,
# persona, name, provider and model change only with its version (store.setups bumps it on
# every update); the texts of the editable layers are part of the key themselves. What is
# returned is shared: read it, never change it.
_FROZEN: OrderedDict[tuple[Any, ...], FrozenConfig] = OrderedDict()
_FROZEN_MAX = 1024


def freeze(
    ctx: TurnStart, *, engine_version: str, ceilings: CapCeilings | None = None,
    groups: Sequence[CapGroup] = (), bounds: Sequence[Mapping[str, Any]] = (),
) -> FrozenConfig:
    """Raises ConfigError when the setup's caps are invalid. A cap above the operator's
    ceiling (lowered since the setup was written) is clamped to it, not refused.

    `bounds` are tool policies (`{"allow": [...] | None, "deny": [...]}`) the turn's tools
    must satisfy besides the setup's own: each narrows, none widens. `groups` are the
    extensions' caps, parsed with the loop's."""
    key = (ctx.setup_id, ctx.setup_version, ctx.persona, ctx.instructions,
           ctx.instructions_version, ctx.policy, ctx.policy_version, ctx.policy_replace,
           ctx.depth, jsonenc.canonical(list(bounds)) if bounds else None,
           engine_version, ceilings, tuple(groups))
    found = _FROZEN.get(key)
    if found is not None:
        _FROZEN.move_to_end(key)
        return found
    frozen = _freeze(ctx, engine_version=engine_version, ceilings=ceilings, groups=groups,
                     bounds=bounds)
    _FROZEN[key] = frozen
    if len(_FROZEN) > _FROZEN_MAX:
        _FROZEN.popitem(last=False)
    return frozen


def _freeze(
    ctx: TurnStart, *, engine_version: str, ceilings: CapCeilings | None,
    groups: Sequence[CapGroup], bounds: Sequence[Mapping[str, Any]],
) -> FrozenConfig:
    caps, extra_caps = parse_caps(ctx.config.get("caps"), ceilings, groups, clamp=True)
    policy = ctx.tool_policy or {}
    allow = policy.get("allow")
    deny = list(policy.get("deny") or [])
    within: list[tuple[str, ...]] = []
    for bound in bounds:
        deny += [d for d in bound.get("deny") or [] if d not in deny]
        if bound.get("allow") is not None:
            within.append(tuple(bound["allow"]))
    snapshot = {
        "engine": engine_version,
        "setup": {
            "id": str(ctx.setup_id),
            "name": ctx.setup_name,
            "version": ctx.setup_version,
            "provider": ctx.provider,
            "model": ctx.model,
            "persona_hash": _digest(ctx.persona),
            "config": redact({k: v for k, v in ctx.config.items() if k != "caps"}),
            "tool_policy": redact(policy),
        },
        "thread": {"instructions_hash": _digest(ctx.instructions),
                   "instructions_version": ctx.instructions_version, "depth": ctx.depth,
                   **({"bounds": list(bounds)} if bounds else {})},
        "org": {"policy_hash": _digest(ctx.policy), "policy_version": ctx.policy_version,
                "policy_replace": ctx.policy_replace},
        "caps": {k: v for c in (caps, *extra_caps.values()) for k, v in asdict(c).items()},
    }
    canonical = jsonenc.canonical(snapshot)
    return FrozenConfig(
        caps=caps,
        snapshot=snapshot,
        hash=hashlib.sha256(canonical).hexdigest(),
        allow=list(allow) if allow is not None else None,
        deny=deny,
        cache=bool(ctx.config.get("prompt_cache", True)),
        within=tuple(within),
        extra_caps=extra_caps,
    )
