"""The org-scoped context every repository call takes (layer: store; imports nothing of ator).

A `Scope` is built at the edge from an authenticated principal; repositories put its
`org_id` into every WHERE clause, so another org's row is never found (a 404, not a 403).
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

__all__ = ["Scope"]


@dataclass(frozen=True, slots=True)
class Scope:
    org_id: UUID
    user_id: UUID | None = None
    role: str = "admin"
