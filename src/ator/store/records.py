"""Row types returned by repositories (layer: store; imports store.scope).

The transport layers read these types; they never import the repositories themselves."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from ator.store.scope import Scope

__all__ = [
    "ApiKey",
    "Event",
    "MailboxItem",
    "McpServer",
    "Org",
    "Principal",
    "Setup",
    "Thread",
    "TreeNode",
    "Turn",
]


@dataclass(frozen=True, slots=True)
class Org:
    id: UUID
    name: str
    monthly_budget_usd: Decimal | None  # the org admin's own budget (<= the ceiling)
    created_at: datetime
    budget_ceiling_usd: Decimal | None = None  # the operator's; the org cannot lift it

    @property
    def budget_limit_usd(self) -> Decimal | None:
        """The monthly limit in force: the lower of the two; None when neither is set."""
        set_ = [v for v in (self.monthly_budget_usd, self.budget_ceiling_usd) if v is not None]
        return min(set_) if set_ else None


@dataclass(frozen=True, slots=True)
class Setup:
    id: UUID
    org_id: UUID
    name: str
    provider: str
    model: str
    persona: str
    config: dict[str, Any]
    tool_policy: dict[str, Any]
    version: int
    archived_at: datetime | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Thread:
    id: UUID
    org_id: UUID
    setup_id: UUID
    title: str
    instructions: str
    parent_id: UUID | None
    root_id: UUID | None
    depth: int
    last_seq: int
    metadata: dict[str, Any]
    created_by: UUID | None
    deleted_at: datetime | None
    created_at: datetime
    voice: bool = False  # voice mode: the voice prompt layer, replies spoken


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    kind: str
    data: dict[str, Any]
    turn_id: UUID | None
    created_at: datetime
    thread_id: UUID | None = None


@dataclass(frozen=True, slots=True)
class MailboxItem:
    id: UUID
    thread_id: UUID
    client_message_id: str
    kind: str
    content: dict[str, Any]
    sender: UUID | None
    turn_id: UUID | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Turn:
    id: UUID
    org_id: UUID
    thread_id: UUID
    status: str
    stop_reason: str | None
    error: str | None
    config_snapshot: dict[str, Any]
    config_hash: str
    owner: str
    steps: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: Decimal
    started_at: datetime
    ended_at: datetime | None
    heartbeat_at: datetime
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Principal:
    org_id: UUID
    user_id: UUID
    role: str
    key_id: UUID
    operator: bool  # the key's org runs this installation (may manage other orgs)

    @property
    def scope(self) -> Scope:
        return Scope(self.org_id, self.user_id, self.role)


@dataclass(frozen=True, slots=True)
class ApiKey:
    id: UUID
    org_id: UUID
    user_id: UUID
    name: str
    prefix: str
    role: str
    revoked_at: datetime | None
    last_used_at: datetime | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class TreeNode:
    """One thread of a subagent tree, with its figures summed over its turns."""

    id: UUID
    parent_id: UUID | None
    depth: int
    title: str
    alias: str | None
    status: str  # running, idle, done/errored/… (the last turn's), cancelled
    steps: int
    tokens: int
    usd: Decimal
    live: bool  # a turn is running now
    told: bool  # its result is in the parent's mailbox
    created_at: datetime


@dataclass(frozen=True, slots=True)
class McpServer:
    id: UUID
    org_id: UUID
    name: str
    transport: str
    url: str | None
    headers: dict[str, str]
    timeout_s: float
    enabled: bool
    allow: list[str] | None
    deny: list[str]
    catalog: list[dict[str, Any]] | None
    last_test: dict[str, Any] | None
    version: int
    created_at: datetime
