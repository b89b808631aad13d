"""The workflows' job kinds and the one way to wake a run's reconciler (layer: workflows;
imports ator.jobs, ator.store).

A run has at most one queued or running reconcile job (its unique key is the run); whoever
changes something the reconciler must act on bumps the run's `changes` first and then
calls `wake` in the same transaction (store/workflows.py says why that order suffices).
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from ator.jobs import JobQueue
from ator.store.database import Connection
from ator.store.scope import Scope

__all__ = ["RECONCILE", "STEP", "run_channel", "wake"]

RECONCILE = "workflow.reconcile"
STEP = "workflow.step"


def run_channel(run_id: UUID | str) -> str:
    """The coordinator channel a run's "look, new events" notices go to."""
    return f"run:{run_id}"


async def wake(queue: JobQueue, conn: Connection, scope: Scope, run_id: UUID, *,
               at: datetime | None = None, timer: str = "run") -> None:
    """Have the run reconciled (at `at`, or now), in the caller's transaction. `timer`
    names a separate unique key for a wake-up that must not take the place of the run's
    immediate one (`pause`: the pause's expiry); the run's lease keeps two apart."""
    await queue.enqueue(scope, RECONCILE, {"run_id": str(run_id)},
                        unique_key=f"{timer}:{run_id}", run_at=at, within=conn)
