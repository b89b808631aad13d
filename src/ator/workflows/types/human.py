"""`human`: a gate a person decides (layer: workflows; imports jsonschema, ator.store,
ator.workflows.step_types).

    {"id": "ok", "type": "human", "prompt": "Ship it?",
     "input_schema": {...},                 # the decision's value (default: an object)
     "deciders": {"role": "admin"} | {"users": ["<user id>", ...]},   # default: members
     "timeout": {"seconds": 3600, "outcome": "fail" | "value", "value": ...}}

Nothing runs on a worker. `create` (in the reconciler's tick) writes the step `waiting`,
its pending action (kind `gate`, store/gates.py) with the expiry job, and the run
`waiting`. The decision takes the one decide-once path of tool approvals
(engine/approvals.py through `HumanGates`, workflows/gates.py); once decided the run is
`running` again and `advance` reads the action: approved → the decision's value (checked
against `input_schema` before the claim) is the step's output; denied → the step fails
(`gate_denied`); expired → the declared outcome (`value`: that value is the output;
`fail`, the default: the step fails, `gate_timeout`). A run resumed after its gate failed
the step asks again: a new gate.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any
from uuid import UUID

from jsonschema import Draft202012Validator

from ator.store import gates as gate_store
from ator.store import workflow_steps as step_store
from ator.store.database import Row
from ator.store.workflow_steps import NewStep
from ator.workflows.step_types import Path, Progress, StepType, Tick, step_schema

__all__ = ["EXPIRE_KIND", "Human"]

# The approvals' expiry job kind (engine/approvals.py `EXPIRE`; checked equal when bound).
EXPIRE_KIND = "approvals.expire"
_ROLES = ["viewer", "member", "admin", "owner"]

_PROPS: dict[str, Any] = {
    "prompt": {"type": "string", "minLength": 1, "maxLength": 8_000},
    "input_schema": {"type": "object"},
    "deciders": {"type": "object", "additionalProperties": False, "properties": {
        "role": {"enum": _ROLES[1:]},
        "users": {"type": "array", "minItems": 1, "maxItems": 100,
                  "items": {"type": "string", "format": "uuid"}}}},
    "timeout": {"type": "object", "required": ["seconds"], "additionalProperties": False,
                "properties": {"seconds": {"type": "number", "exclusiveMinimum": 0,
                                           "maximum": 31_536_000},
                               "outcome": {"enum": ["fail", "value"]},
                               "value": {}}},
}


class Human(StepType):
    name = "human"
    schema = step_schema("human", ["prompt"], **_PROPS)

    def __init__(self, attempts: int = 5) -> None:
        self.attempts = attempts

    def check(self, spec: Mapping[str, Any]) -> Iterator[tuple[Path, str]]:
        schema = spec.get("input_schema")
        if isinstance(schema, dict):
            meta = Draft202012Validator(Draft202012Validator.META_SCHEMA)
            for e in meta.iter_errors(schema):
                yield ("input_schema", *e.absolute_path), e.message
        timeout = spec.get("timeout") or {}
        if timeout.get("outcome") == "value" and "value" not in timeout:
            yield ("timeout",), "an outcome `value` needs its `value`"

    async def create(self, tick: Tick, new: NewStep) -> Progress:
        if not await tick.charge(new.spec, 1):
            return False
        action_id = uuid.uuid4()
        step_id = await tick.insert(replace(new, status="waiting",
                                            input={"gate": str(action_id)}))
        await self._open(tick, new.spec, new.path, step_id, action_id)
        return False

    async def _open(self, tick: Tick, spec: dict[str, Any], path: str, step_id: UUID,
                    action_id: UUID) -> None:
        timeout = spec.get("timeout")
        await gate_store.open_gate(
            tick.conn, action_id=action_id, org_id=tick.run.org_id, run_id=tick.run.id,
            owner=tick.owner, name=spec["id"],
            subject={"run_id": str(tick.run.id), "step_id": str(step_id),
                     "prompt": spec["prompt"],
                     "input_schema": spec.get("input_schema", {"type": "object"}),
                     "deciders": spec.get("deciders", {"role": "member"})},
            expire_after=float(timeout["seconds"]) if timeout else None,
            job_kind=EXPIRE_KIND, attempts=self.attempts)
        await tick.event("gate_opened", {"step": path, "approval_id": str(action_id)})

    async def advance(self, tick: Tick, spec: dict[str, Any], row: Row) -> Progress:
        if row["status"] == "pending":
            # Resumed after the gate failed it (denied, timed out): ask again, a new gate.
            action_id = uuid.uuid4()
            if await gate_store.reopen_step(tick.conn, row["id"], {"gate": str(action_id)}):
                await self._open(tick, spec, row["path"], row["id"], action_id)
            return False
        given = await step_store.input_of(tick.conn, row["id"])
        gate = given.get("gate") if isinstance(given, dict) else None
        action = (await gate_store.action(tick.conn, tick.run.org_id, UUID(str(gate)))
                  if gate else None)
        if action is None:
            return await tick.fail_step(row["id"], spec, row["path"], "the gate is gone")
        if action.status == "pending":
            return False  # decided meanwhile by nobody: the decision wakes the run
        if action.status == "approved":
            value = action.decided_arguments if action.decided_arguments is not None else {}
            return await tick.done(row["id"], row["path"], value)
        if action.status == "denied":
            why = "a person denied the gate" + (f": {action.reason}" if action.reason else "")
            return await tick.fail_step(row["id"], spec, row["path"], why, "gate_denied")
        timeout = spec.get("timeout") or {}
        if timeout.get("outcome") == "value":
            return await tick.done(row["id"], row["path"], timeout.get("value"))
        return await tick.fail_step(row["id"], spec, row["path"],
                                    "nobody decided the gate in time", "gate_timeout")
