"""`agent`: a turn on a setup through the same engine, with a structured output validated
against a JSON Schema and one repair attempt (layer: workflows; imports agent.extension,
jsonschema, ator.store, ator.workflows.*).

    {"id": "review", "type": "agent", "setup_id": "…", "prompt": "'Review: ' & input.doc",
     "output_schema": {"type": "object", "required": ["ok"]}}

`prompt` is an expression giving the message. The step's turns run on a hidden thread of
its own (bound once per step, so a retried attempt resends the same client message id
and follows the turn the first attempt started: a step is never paid for twice). With an
`output_schema` the reply must be that JSON value (a fenced block is accepted); if it is
not, the turn is told why once and its second reply is checked the same way; a second
miss fails the step. Without one the output is the reply's text. The turns' usage and
cost are stored with the step's output, in the transaction that completes it. A turn
that ends `budget` (the run's usd budget or the org's) ends the run `budget`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any
from uuid import UUID

from jsonschema import Draft202012Validator

from ator.agent.extension import Asker, TurnReply
from ator.errors import NotFound
from ator.store import threads as threads_store
from ator.store import workflow_threads as thread_store
from ator.workflows.step_types import (
    EXPR,
    Attempt,
    Executable,
    Path,
    StepError,
    child_schema,
    step_schema,
)

__all__ = ["Agent"]

_PROPS: dict[str, Any] = {
    "setup_id": {"type": "string", "format": "uuid"}, "prompt": EXPR,
    "output_schema": {"type": "object"},
    "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 3_600}}
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


def _parse(text: str) -> Any:
    body = text.strip()
    fenced = _FENCE.match(body)
    return json.loads(fenced.group(1) if fenced else body)


def _mismatch(schema: dict[str, Any], text: str) -> tuple[Any, str | None]:
    """(value, None) when `text` is a JSON value matching `schema`; else (None, why)."""
    try:
        value = _parse(text)
    except ValueError as exc:
        return None, f"the reply is not JSON ({exc})"
    errors = sorted(Draft202012Validator(schema).iter_errors(value), key=lambda e: e.path)
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path)
        return None, f"at /{where}: {errors[0].message}"
    return value, None


class AgentBudget(StepError):
    """The step's turn ended `budget`: the run ends `budget` too."""

    code = "budget"


class Agent(Executable):
    name = "agent"
    schema = step_schema("agent", ["setup_id", "prompt"], **_PROPS)
    child_schema = child_schema("agent", ["setup_id", "prompt"], **_PROPS)
    exprs = ("prompt",)

    def __init__(self, asker: Asker | None = None) -> None:
        self.asker = asker

    def check(self, spec: Mapping[str, Any]) -> Iterator[tuple[Path, str]]:
        schema = spec.get("output_schema")
        if isinstance(schema, dict):
            meta = Draft202012Validator(Draft202012Validator.META_SCHEMA)
            for e in meta.iter_errors(schema):
                yield ("output_schema", *e.absolute_path), e.message

    async def run(self, attempt: Attempt) -> Any:
        if self.asker is None:
            raise StepError("this engine runs no agent steps (no turns)")
        step, spec = attempt.step, attempt.step.spec
        prompt = await attempt.evaluate(spec["prompt"], await attempt.data())
        if not isinstance(prompt, str) or not prompt.strip():
            raise StepError("`prompt` must give a non-empty string")
        thread_id = await self._thread(attempt)
        schema = spec.get("output_schema")
        if schema is not None:
            prompt += ("\n\nReply with only a JSON value (no prose) matching this JSON "
                       f"Schema:\n{json.dumps(schema)}")
        timeout = float(spec.get("timeout_s", 600))
        reply = await self._ask(attempt, thread_id, prompt, f"wf:{step.id}:0", timeout)
        if schema is None:
            return reply.text
        value, why = _mismatch(schema, reply.text)
        if why is None:
            return value
        reply = await self._ask(attempt, thread_id, f"Your reply does not match the schema: "
                                f"{why}. Reply again with only the corrected JSON value.",
                                f"wf:{step.id}:1", timeout)
        value, again = _mismatch(schema, reply.text)
        if again is not None:
            raise StepError(f"the agent's output failed its schema twice: {again}",
                            code="output_invalid")
        return value

    async def _thread(self, attempt: Attempt) -> UUID:
        step = attempt.step
        found = await thread_store.thread_of(attempt.db, attempt.scope, step.id)
        if found is not None:
            return found
        try:
            made = await threads_store.create_thread(
                attempt.db, attempt.scope, _setup_id(step.spec),
                title=f"workflow step {step.path}"[:200],
                metadata={"workflow_run_id": str(step.run_id), "workflow_step": step.path})
        except NotFound:
            raise StepError("the step's setup is not a live setup of this org",
                            code="setup_not_found") from None
        return await thread_store.bind(attempt.db, attempt.scope, step.id, step.run_id, made.id)

    async def _ask(self, attempt: Attempt, thread_id: UUID, text: str, cmid: str,
                   timeout: float) -> TurnReply:
        assert self.asker is not None
        reply = await self.asker.ask(attempt.scope, thread_id, text, client_message_id=cmid,
                                     timeout=timeout)
        for key, n in reply.usage.items():  # the turns' token counts, summed
            if isinstance(n, int) and not isinstance(n, bool):
                attempt.usage[key] = int(attempt.usage.get(key, 0)) + n
        attempt.cost_usd += Decimal(reply.cost_usd)
        if reply.status == "budget" or reply.stop_reason == "budget":
            raise AgentBudget(f"the agent's turn ended budget: {reply.error or 'no reason'}")
        if reply.status != "done":
            raise StepError(f"the agent's turn ended {reply.status} ({reply.stop_reason}): "
                            f"{reply.error or ''}", code="turn_failed")
        return reply


def _setup_id(spec: Mapping[str, Any]) -> UUID:
    try:
        return UUID(str(spec["setup_id"]))
    except ValueError:
        raise StepError("`setup_id` is not a setup id", code="setup_not_found") from None
