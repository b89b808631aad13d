"""Telling a conversation how the workflow run it started ended (layer: workflows; imports
agent.extension, agent.notices, agent.state, jobs, security.untrusted, store).

    a run ends (any writer) ─► its end event queues `workflow.notify` in that transaction
                               (store/run_origins.py)
    workflow.notify ─► one notice in the starting thread's mailbox under the claim
                       `workflow:<run id>` (agent/notices.py: the insert is the claim, so
                       the thread is told once), then the thread is woken
    thread busy ─► the notice injector of that prefix shows it between steps, persisted
                   first; idle ─► its next turn takes it

The result is data from a run (agent steps read outside content): it is capped, its tags
are neutralized, and the history wraps it as untrusted like a subagent's.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ator import jsonenc
from ator.agent.extension import Waker
from ator.agent.notices import NoticeInjector, deliver
from ator.agent.state import TurnContext, TurnState
from ator.jobs import JobContext
from ator.security.untrusted import neutralize
from ator.store import run_origins as origin_store
from ator.store import turns as turn_store
from ator.store import workflows as run_store
from ator.store.database import Database, Row

__all__ = ["CLAIM", "OPEN_RUNS_SQL", "OpenRuns", "RunTeller", "render"]

CLAIM = "workflow:"  # + the run's id
OUTPUT_CHARS = 4000
TAGS = ("workflow_result", "untrusted-data")

#: The per-turn column (a `TurnField` over the thread `t`): runs this thread started whose
#: result it was not told yet (a turn with some looks for notices between steps).
OPEN_RUNS_SQL = f"""(SELECT count(*) FROM run_origins o
  WHERE o.thread_id = t.id AND o.org_id = t.org_id
    AND NOT EXISTS (SELECT 1 FROM mailbox m WHERE m.thread_id = t.id AND m.org_id = t.org_id
                      AND m.client_message_id = '{CLAIM}' || o.run_id::text))"""


@dataclass(frozen=True, slots=True)
class OpenRuns:
    """The turn's count of runs its thread started and was not told the end of."""

    count: int

    @staticmethod
    def build(value: Any) -> OpenRuns:
        return OpenRuns(int(value or 0))


def render(run: Row, workflow: str) -> tuple[str, dict[str, Any]]:
    """The text the model reads and the data kept beside it."""
    status = str(run["status"])
    reason = run["fail_reason"] or run["cancel_reason"]
    attrs = {"run_id": str(run["id"]), "workflow": workflow, "status": status}
    if reason:
        attrs["reason"] = str(reason)
    attrs["steps"] = str(run["steps_used"])
    head = " ".join(f'{k}="{html.escape(v, quote=True)}"' for k, v in attrs.items())
    body = "" if run["output"] is None else jsonenc.dumps(run["output"])
    cut = len(body) > OUTPUT_CHARS
    lines = [f"<workflow_result {head}>"]
    if body:
        lines.append(neutralize(body[:OUTPUT_CHARS], TAGS))
    if run["error"]:
        lines.append(f"[ator] The run ended with: {neutralize(str(run['error']), TAGS)}")
    if cut:
        lines.append(f"[ator] Output cut at {OUTPUT_CHARS} of {len(body)} characters: call "
                     f'workflow_status(run_id="{run["id"]}") for all of it.')
    lines.append("</workflow_result>")
    data = {"workflow_run": {"id": str(run["id"]), "workflow": workflow, "status": status,
                             "reason": reason, "steps": run["steps_used"], "truncated": cut}}
    return "\n".join(lines), data


class RunTeller:
    """The `workflow.notify` job and the injector of its notices."""

    def __init__(self, db: Database, waker: Waker) -> None:
        self.db = db
        self.waker = waker
        self.started_in: set[UUID] = set()  # turns of this process that started a run

    async def handle(self, ctx: JobContext, payload: dict[str, Any]) -> None:
        run_id = UUID(payload["run_id"])
        scope = ctx.scope
        run = await run_store.get_run(self.db, scope, run_id)
        origin = await origin_store.get(self.db, scope, run_id)
        if run is None or origin is None or origin["thread_id"] is None:
            return  # deleted with its org or its thread
        workflow = await run_store.get_workflow(self.db, scope, run["workflow_id"])
        text, data = render(run, workflow["name"] if workflow else str(run["workflow_id"]))
        await deliver(self.db, self.waker, scope, origin["thread_id"],
                      claim=f"{CLAIM}{run_id}", source=f"workflow run {run_id}", text=text,
                      data=data)

    def injector(self) -> NoticeInjector:
        def wants(turn: TurnContext) -> bool:
            open_runs = turn.get(OpenRuns)
            return (open_runs is not None and open_runs.count > 0) \
                or turn.turn_id in self.started_in

        return NoticeInjector(self.db, CLAIM, wants)

    # A TurnEnd: a turn that ends forgets it started runs (the per-turn count is read anew).
    def parts(self, turn: TurnContext, state: TurnState,
              finish: turn_store.Finished) -> Sequence[turn_store.StepPart]:
        self.started_in.discard(turn.turn_id)
        return []

    async def committed(self, turn: TurnContext, write: turn_store.StepWrite) -> None:
        return None

