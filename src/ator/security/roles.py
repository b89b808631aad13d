"""The roles of an org's members and keys, in one place (layer: security; imports
ator.errors).

Three roles, ordered: viewer < member < admin (the operator is an org flag, not a role). The
API's dependencies, the socket gateway's commands, key creation, the CLI and the database's
check constraints all read them from here.
"""

from __future__ import annotations

from typing import Final, Literal

from ator.errors import Forbidden

__all__ = ["ROLES", "Role", "check_role", "has_role"]

Role = Literal["admin", "member", "viewer"]
ROLES: Final[tuple[Role, ...]] = ("admin", "member", "viewer")
_RANK: Final = {"viewer": 0, "member": 1, "admin": 2}


def has_role(role: str, needed: str) -> bool:
    """Whether `role` is at least `needed` (an unknown role has none)."""
    return _RANK.get(role, -1) >= _RANK[needed]


def check_role(role: str, needed: str) -> None:
    """Raises Forbidden unless `role` is at least `needed`."""
    if not has_role(role, needed):
        raise Forbidden(f"this needs the {needed} role; the key has {role}")
