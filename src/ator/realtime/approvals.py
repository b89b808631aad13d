"""Approvals over the socket (layer: realtime; imports engine.approvals, engine.runtime,
engine.wire, errors, security.roles).

The `decide` command (`{approval_id, decision: "approve"|"deny", arguments?, reason?}`,
members) takes the same decide-once path as `POST /v1/approvals/{id}/decision`, with the
same codes (404 `not_found`, 409 `approval_decided`, 422 `invalid_arguments` /
`invalid_command`). The org room gets `approval.decided` from the replica where a decision
committed (a held call's request reaches it as `turn.ended` with `held`).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ator.engine.approvals import Approvals, Decision, action_view
from ator.engine.runtime import Ator
from ator.engine.wire import frame
from ator.errors import ValidationFailed
from ator.security.limits import SETUP_CONFIG, check_json
from ator.security.roles import check_role
from ator.store.records import Principal

__all__ = ["decide", "decided_frame"]

_REASON_CHARS = 2000


def _refuse(message: str) -> ValidationFailed:
    return ValidationFailed(message, code="invalid_command")


async def decide(ator: Ator, p: Principal, payload: dict[str, Any]) -> dict[str, Any]:
    check_role(p.role, "member")
    try:
        action_id = UUID(str(payload.get("approval_id")))
    except ValueError:
        raise _refuse("approval_id must be an approval's id") from None
    choice = payload.get("decision")
    if choice not in ("approve", "deny"):
        raise _refuse("decision must be 'approve' or 'deny'")
    arguments = payload.get("arguments")
    if arguments is not None:
        if not isinstance(arguments, dict) or choice != "approve":
            raise _refuse("arguments: an object, and only with an approval")
        check_json(arguments, SETUP_CONFIG, ("arguments",))
    reason = payload.get("reason")
    if reason is not None and (not isinstance(reason, str) or len(reason) > _REASON_CHARS):
        raise _refuse(f"reason must be text of at most {_REASON_CHARS} characters")
    decided = await ator.service(Approvals).decide(
        p.scope, action_id, p.user_id, Decision(choice == "approve", arguments, reason))
    return {"approval": action_view(decided)}


def decided_frame(view: dict[str, Any]) -> dict[str, Any]:
    """The org room's frame for a decision (the console's approvals list updates from it)."""
    return frame("approval.decided", {k: view[k] for k in (
        "id", "status", "thread_id", "name", "decided_by", "decided_at", "reason")})
