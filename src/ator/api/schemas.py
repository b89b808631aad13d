"""Request bodies (layer: api; imports pydantic). Every body is validated before use.

The free-form fields (a setup's `config` and `tool_policy`, a thread's `metadata`) are typed
and bounded by the runtime where they are written (`providers.config`, `tools.policy`,
`security.limits`), so the Python API and the HTTP API refuse the same things with the same
422 codes; the descriptions here say what they accept.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from ator.security.roles import Role

__all__ = [
    "KeyIn",
    "MessageIn",
    "OrgIn",
    "OrgPatch",
    "SecretIn",
    "SetupIn",
    "SetupPatch",
    "ThreadIn",
]

Name = Field(min_length=1, max_length=200)

_CONFIG = (
    "Provider options, checked per provider with unknown keys refused. anthropic/openai: "
    "api_key, auth_token ('secret:NAME' references only), base_url (http/https, no user "
    "info), headers (at most 32; no credential, hop-by-hop or routing names), timeout "
    "(seconds, up to the operator's ceiling), prompt_cache, caps. scripted: script, "
    "repeat_last, prompt_cache, caps. local: model_path (inside the operator's models "
    "directory), prompt_cache, caps. At most 256 KiB as JSON, 32 levels deep."
)
_TOOL_POLICY = ('{"allow": [tool names] | null, "deny": [tool names]}; allow null or absent '
                "means every tool, [] none; deny wins.")
_METADATA = "Free-form JSON of the caller's: at most 64 KiB, 16 levels deep, 2000 values."


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _usd() -> Any:
    return Field(default=None, ge=0, max_digits=14, decimal_places=6, allow_inf_nan=False)


class OrgIn(_Body):
    name: str = Name
    monthly_budget_usd: Decimal | None = _usd()
    budget_ceiling_usd: Decimal | None = _usd()  # the operator's; the org cannot lift it


class OrgPatch(_Body):
    """Only the fields present change; `null` clears. The ceiling is the operator's."""

    monthly_budget_usd: Decimal | None = _usd()
    budget_ceiling_usd: Decimal | None = _usd()


class TreeCapsIn(_Body):
    """An org's own subagent tree caps; each lowers what the org's setups allow (bounded by
    the operator's ceilings). Left out: no org-level cap."""

    subagent_depth: int | None = Field(default=None, ge=0)
    subagent_width: int | None = Field(default=None, ge=0)
    subagent_live: int | None = Field(default=None, ge=0)
    tree_tokens: int | None = Field(default=None, ge=0)
    tree_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)


class KeyIn(_Body):
    name: str = Name
    role: Role
    email: str = Field(min_length=3, max_length=320, pattern=r"^[^@\s]+@[^@\s]+$")


class SecretIn(_Body):
    value: str = Field(min_length=1, max_length=20_000)


class SetupIn(_Body):
    name: str = Name
    provider: str = Field(min_length=1, max_length=50)
    model: str = Field(min_length=1, max_length=200)
    persona: str = Field(default="", max_length=50_000)
    config: dict[str, Any] = Field(default_factory=dict, description=_CONFIG)
    tool_policy: dict[str, Any] = Field(default_factory=dict, description=_TOOL_POLICY)


class SetupPatch(_Body):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    provider: str | None = Field(default=None, min_length=1, max_length=50)
    model: str | None = Field(default=None, min_length=1, max_length=200)
    persona: str | None = Field(default=None, max_length=50_000)
    config: dict[str, Any] | None = Field(
        default=None,
        description=_CONFIG + " Replaces the whole config; a '[redacted]' placeholder (as GET "
        "shows) keeps the stored value at that place.",
    )
    tool_policy: dict[str, Any] | None = Field(default=None, description=_TOOL_POLICY)


class ThreadIn(_Body):
    setup_id: UUID
    title: str = Field(default="", max_length=500)
    instructions: str = Field(default="", max_length=50_000)
    metadata: dict[str, Any] = Field(default_factory=dict, description=_METADATA)


class MessageIn(_Body):
    text: str = Field(min_length=1, max_length=100_000)
    client_message_id: str | None = Field(default=None, min_length=1, max_length=200,
                                          pattern=r"^[A-Za-z0-9._:\-]+$")


class PolicyIn(_Body):
    """The org's policy prompt layer. `replace`: it stands instead of ator's core
    instructions (the rule that tool output is data is kept). `if_version`: refuse (409)
    unless this is the version in force."""

    text: str = Field(max_length=50_000)
    replace: bool = False
    if_version: int | None = Field(default=None, ge=0, le=2**31 - 1)


class InstructionsIn(_Body):
    """A thread's instructions layer (see PolicyIn for `if_version`)."""

    text: str = Field(max_length=50_000)
    if_version: int | None = Field(default=None, ge=0, le=2**31 - 1)
