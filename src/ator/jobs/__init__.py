"""Durable jobs and schedules on PostgreSQL (layer: jobs — below the engine and its services,
above agent/tools/providers; imports store, obs, context, errors, settings, and for
model work cost, providers, security).

Features register `JobKind`s on a `JobKinds` registry; `JobQueue` enqueues (also inside a
caller's transaction); `Worker` claims fairly between orgs and runs them; `Schedules` keeps
cron rows and `Scheduler` fires each tick once across replicas; `JobRunner` runs worker and
scheduler together for `ator worker` and `ator serve`; `ModelWork` calls a model outside a
turn through the budget ledger (analyses and other background work).
"""

from ator.jobs.clock import Clock, ManualClock, SystemClock
from ator.jobs.kinds import Handler, JobContext, JobKind, JobKinds, LeaseLost, Retry
from ator.jobs.model_work import BudgetRefused, ModelWork, WorkCall, WorkResult
from ator.jobs.queue import JobQueue
from ator.jobs.runner import JobRunner
from ator.jobs.schedules import Scheduler, Schedules
from ator.jobs.worker import Worker, WorkerStats

__all__ = [
    "BudgetRefused",
    "Clock",
    "Handler",
    "JobContext",
    "JobKind",
    "JobKinds",
    "JobQueue",
    "JobRunner",
    "LeaseLost",
    "ManualClock",
    "ModelWork",
    "Retry",
    "Scheduler",
    "Schedules",
    "SystemClock",
    "WorkCall",
    "WorkResult",
    "Worker",
    "WorkerStats",
]
