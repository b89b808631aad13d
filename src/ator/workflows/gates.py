"""`HumanGates`: the decision kind of a workflow's `human` gates (layer: workflows; imports
jsonschema, ator.errors, ator.jobs, ator.security, ator.store, ator.workflows.kinds).

The engine's `Approvals` (engine/approvals.py) registers it (it satisfies that module's
`DecisionKind` protocol by shape): a gate is decided on the same decide-once path as a
held tool call — the same claim, 404 for another org's, 409 `approval_decided` for the
second of two decisions, expiry by the same job, the action row as the audit. Here:

- `may_decide`: the gate's deciders (`{"role": …}`, at least that role; `{"users": […]}`,
  only those users); anyone else gets 403 `not_a_decider`;
- `check`: the decision's value against the gate's `input_schema` (422
  `invalid_arguments`);
- `approved`: records the value as the action's result (the step's output is read by the
  reconciler from the action, in its own tick: one writer);
- `settled`: the run goes back to `running` (its deadline moved by the wait) and its
  reconciler is woken, in one transaction; idempotent (a run no longer waiting is left).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from jsonschema import Draft202012Validator

from ator.errors import Forbidden, ValidationFailed
from ator.jobs import JobQueue
from ator.security.roles import has_role
from ator.store import gates as gate_store
from ator.store import workflows as run_store
from ator.store.approvals import Action
from ator.store.database import Database
from ator.store.scope import Scope
from ator.workflows.kinds import wake

__all__ = ["HumanGates"]


class HumanGates:
    name = gate_store.GATE_KIND

    def __init__(self, db: Database, queue: JobQueue) -> None:
        self.db = db
        self.queue = queue

    async def may_decide(self, scope: Scope, action: Action, by: UUID) -> None:
        deciders = action.subject.get("deciders") or {"role": "member"}
        users = deciders.get("users")
        if users is not None:
            if str(by) not in {str(u) for u in users}:
                raise Forbidden("this gate is decided by named users only",
                                code="not_a_decider")
        elif not has_role(scope.role, str(deciders.get("role", "member"))):
            raise Forbidden(f"this gate is decided by a {deciders.get('role')} or above",
                            code="not_a_decider")

    async def check(self, scope: Scope, action: Action,
                    arguments: dict[str, Any] | None) -> None:
        schema = action.subject.get("input_schema") or {"type": "object"}
        value = {} if arguments is None else arguments
        errors = sorted(Draft202012Validator(schema).iter_errors(value),
                        key=lambda e: list(e.absolute_path))
        if errors:
            where = "/".join(str(p) for p in errors[0].absolute_path)
            msg = f"the decision at /{where}: {errors[0].message}"
            raise ValidationFailed(msg, code="invalid_arguments", errors=[
                {"loc": ["arguments", *errors[0].absolute_path], "msg": errors[0].message,
                 "type": "invalid_arguments"}])

    async def approved(self, scope: Scope, action: Action,
                       arguments: dict[str, Any]) -> dict[str, Any] | None:
        value = action.decided_arguments if action.decided_arguments is not None else {}
        return {"results": [{"type": "gate", "value": value}]}

    def refused(self, action: Action, status: str, reason: str | None) -> dict[str, Any] | None:
        return None  # no thread: the run is woken by `settled`

    async def settled(self, scope: Scope, action: Action) -> None:
        run_id = UUID(str(action.subject["run_id"]))
        async with self.db.begin() as conn:
            if await gate_store.end_wait(conn, action.org_id, run_id):
                await run_store.add_event(conn, run_id, "gate_decided", {
                    "approval_id": str(action.id), "status": action.status,
                    "by": str(action.decided_by) if action.decided_by else None}, bump=True)
                await wake(self.queue, conn, Scope(action.org_id), run_id)
