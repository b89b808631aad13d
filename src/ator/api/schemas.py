"""Request bodies (layer: api; imports pydantic). Every body is validated before use."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

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


class KeyIn(_Body):
    name: str = Name
    role: Literal["admin", "member", "viewer"]
    email: str = Field(min_length=3, max_length=320, pattern=r"^[^@\s]+@[^@\s]+$")


class SecretIn(_Body):
    value: str = Field(min_length=1, max_length=20_000)


class SetupIn(_Body):
    name: str = Name
    provider: str = Field(min_length=1, max_length=50)
    model: str = Field(min_length=1, max_length=200)
    persona: str = Field(default="", max_length=50_000)
    config: dict[str, Any] = Field(default_factory=dict)
    tool_policy: dict[str, Any] = Field(default_factory=dict)


class SetupPatch(_Body):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    provider: str | None = Field(default=None, min_length=1, max_length=50)
    model: str | None = Field(default=None, min_length=1, max_length=200)
    persona: str | None = Field(default=None, max_length=50_000)
    config: dict[str, Any] | None = None
    tool_policy: dict[str, Any] | None = None


class ThreadIn(_Body):
    setup_id: UUID
    title: str = Field(default="", max_length=500)
    instructions: str = Field(default="", max_length=50_000)
    metadata: dict[str, Any] = Field(default_factory=dict)


class MessageIn(_Body):
    text: str = Field(min_length=1, max_length=100_000)
    client_message_id: str | None = Field(default=None, min_length=1, max_length=200,
                                          pattern=r"^[A-Za-z0-9._:\-]+$")
