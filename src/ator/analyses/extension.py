"""Analyses as an extension of the kernel (layer: analyses; imports agent.extension,
ator.jobs, ator.providers, ator.store, ator.workflows (its service), ator.analyses.*).

Contributes the `Analyses` service (with the built-in kinds, builtin.py, on the process's
default model), `Evals` and its `ModelWork`, the `analyses.run` job kind (3
attempts, then dead and replayable) and a turn end that queues the runs a turn's end
triggers in the turn's final statement. Its tables come with migration 0020; its routes are
`ator.api.analyses`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from ator.agent.extension import Extension, Kernel, Services, TurnEnd
from ator.agent.state import TurnContext, TurnState
from ator.analyses.builtin import builtin_kinds
from ator.analyses.evals import Evals
from ator.analyses.runner import RUN, RUN_ATTEMPTS, Runner
from ator.analyses.service import Analyses
from ator.errors import ConfigError
from ator.jobs import JobContext, JobKind, JobKinds, JobQueue, ModelWork, Schedules
from ator.providers.config import ConfigPolicy
from ator.providers.registry import default_provider
from ator.store import turns as turn_store
from ator.store.analyses import TurnEndedRuns
from ator.store.scope import Scope
from ator.workflows import Workflows

__all__ = ["AnalysesExtension", "TurnEndedAnalyses"]


class TurnEndedAnalyses(TurnEnd):
    def __init__(self, analyses: Analyses) -> None:
        self.analyses = analyses

    def parts(self, turn: TurnContext, state: TurnState,
              finish: turn_store.Finished) -> Sequence[turn_store.StepPart]:
        code = tuple(k.name for k in self.analyses.code_kinds if "turn_ended" in k.triggers)
        return [TurnEndedRuns(RUN, RUN_ATTEMPTS, code)]

    async def committed(self, turn: TurnContext, write: turn_store.StepWrite) -> None:
        return None


class AnalysesExtension(Extension):
    name = "analyses"

    def __init__(self, kernel: Kernel) -> None:
        if kernel.providers is None:
            raise ConfigError("analyses need the engine's provider registry")
        self.work = ModelWork(kernel.db, kernel.providers, kernel.prices, kernel.master_key,
                              fail_closed=kernel.settings.budget_fail_closed)
        self._kinds = JobKinds([JobKind(RUN, self._run, max_attempts=RUN_ATTEMPTS,
                                        backoff_base=1.0, backoff_cap=30.0, timeout=300.0)])
        queue = JobQueue(kernel.db, self._kinds)
        providers, settings = kernel.providers, kernel.settings

        def check_model(provider: str, model: str, config: Mapping[str, Any]) -> None:
            parsed = providers.parse_config(provider, config,
                                            ConfigPolicy.from_settings(settings))
            providers.check_setup(provider, model, parsed)
            base_url = getattr(parsed, "base_url", None)
            if base_url:
                providers.check_endpoint(str(base_url))

        self.analyses = Analyses(kernel.db, queue, Schedules(kernel.db, self._kinds),
                                 check_model)
        waker = kernel.waker

        async def notify(scope: Scope, thread_id: Any) -> None:
            await waker.notify(scope, thread_id)

        self.runner = Runner(kernel.db, self.work, self.analyses.kind, notify)
        self.evals = Evals(kernel.db)
        provider, model = default_provider(kernel.settings)
        for kind in builtin_kinds(provider, model):
            self.analyses.define(kind)
        self._end = TurnEndedAnalyses(self.analyses)

    async def _run(self, ctx: JobContext, payload: dict[str, Any]) -> None:
        await self.runner.handle(ctx, payload)

    def bound(self, services: Services) -> None:
        try:
            workflows = services.get(Workflows)
        except ConfigError:
            return  # an engine without workflows: the apply step says so when it runs

        async def start_run(scope: Scope, workflow_id: UUID, input: Any, key: str) -> object:
            return await workflows.start(scope, workflow_id, input, key=key)

        self.runner.start_run = start_run

    def ends(self) -> Sequence[TurnEnd]:
        return [self._end]

    def job_kinds(self) -> Sequence[Any]:
        return list(self._kinds)

    def services(self) -> Mapping[type, object]:
        return {Analyses: self.analyses, ModelWork: self.work, Evals: self.evals}
