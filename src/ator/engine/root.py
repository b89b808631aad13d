"""The composition root: the engine assembled from its extensions (layer: engine; imports
agent.extension, analyses.extension, engine.*, knowledge.extension, retention.extension,
sso.extension, subagents.extension, voice.extension, webhooks.extension, tools).

    kernel (db, coordinator, settings, prices, master key, wakes)
      └─ each extension, built from the kernel
           └─ contributions gathered in order: tools, toolsets, hooks, turn ends, per-turn
              fields, caps, services (one registry, reached by type), routes, rooms, job
              kinds, migrations
                └─ the turn runner, the actor, the reaper

Nothing here names a feature but the default list (`DEFAULT_EXTENSIONS`), and nothing built
here holds a reference to what built it: extensions reach the actor through the kernel's
`Wakes`, which the actor serves once made.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import ator
from ator.agent.caps import CapGroup, Caps, parse_caps
from ator.agent.extension import Extension, Kernel
from ator.agent.hooks import LoopHook
from ator.analyses.extension import AnalysesExtension
from ator.coord.base import Coordinator
from ator.cost.prices import PriceTable
from ator.engine.access import Access
from ator.engine.actor import Actor, Wakes
from ator.engine.approvals_extension import ApprovalsExtension
from ator.engine.asks import Asks
from ator.engine.context_policy import ContextPolicy
from ator.engine.daily_caps import DailyCapsExtension
from ator.engine.inspector import Inspector
from ator.engine.instructions import Prompts
from ator.engine.logins import LoginThrottle
from ator.engine.mcp_extension import McpExtension
from ator.engine.publish import Publisher
from ator.engine.reaper import Reaper
from ator.engine.tenancy import Tenancy
from ator.engine.tool_calls import ToolCalls
from ator.engine.trace_extension import TracingExtension
from ator.engine.turn import TurnRunner
from ator.errors import ConfigError
from ator.foreground import Foreground
from ator.jobs import JobKinds, JobQueue, JobRunner, ModelWork, Schedules
from ator.knowledge.extension import KnowledgeExtension
from ator.providers.registry import ProviderRegistry
from ator.retention.extension import RetentionExtension
from ator.security.crypto import MasterKey
from ator.settings import Settings
from ator.sso.extension import SsoExtension
from ator.store.database import Database
from ator.subagents.extension import SubagentsExtension
from ator.tools.base import Tool
from ator.tools.builtin import builtin_tools
from ator.tools.toolset import OrgToolset, StaticToolset, Toolset
from ator.voice.extension import VoiceExtension
from ator.webhooks.extension import WebhooksExtension
from ator.workflows.extension import WorkflowsExtension

__all__ = ["DEFAULT_EXTENSIONS", "Engine", "ExtensionFactory", "Services", "assemble"]

T = TypeVar("T")
ExtensionFactory = Callable[[Kernel], Extension]

#: What `Ator.open` builds the engine from unless told otherwise.
DEFAULT_EXTENSIONS: tuple[ExtensionFactory, ...] = (DailyCapsExtension, KnowledgeExtension,
                                                   McpExtension, SubagentsExtension,
                                                   WebhooksExtension, WorkflowsExtension,
                                                   ApprovalsExtension, AnalysesExtension,
                                                   RetentionExtension, VoiceExtension,
                                                   SsoExtension, TracingExtension)


class Services:
    """The one registry of services, by type: what tools reach through
    `ToolContext.service(Kind)` and callers through `Ator.service(Kind)`."""

    def __init__(self, found: Mapping[type, object]) -> None:
        self._found = dict(found)

    def get(self, kind: type[T]) -> T:
        """The service of type `kind`. Raises ConfigError when the engine has none."""
        found = self._found.get(kind)
        if found is None:
            raise ConfigError(f"no {kind.__name__} service in this engine")
        return cast(T, found)

    def add(self, kind: type[T], service: T) -> None:
        """Register a core service built after the extensions (a caller's own wins)."""
        self._found.setdefault(kind, service)

    def mapping(self) -> dict[type, object]:
        return dict(self._found)


@dataclass
class Engine:
    """Everything the root assembled; `Ator` serves it."""

    kernel: Kernel
    extensions: list[Extension]
    services: Services
    cap_groups: tuple[CapGroup, ...]
    publisher: Publisher
    runner: TurnRunner
    actor: Actor
    reaper: Reaper
    job_runner: JobRunner
    asks: Asks
    foreground: Foreground  # the requests a starting turn lets go first
    routes: list[Any] = field(default_factory=list)
    rooms: list[Any] = field(default_factory=list)
    migrations: list[str] = field(default_factory=list)

    def check_caps(self, raw: Any) -> None:
        """Check a setup's `config.caps` against every cap the engine knows (the loop's and
        the extensions'). Raises ConfigError (422) like `Caps.from_config`."""
        parse_caps(raw, self.kernel.settings.cap_ceilings, self.cap_groups)


def assemble(
    settings: Settings,
    *,
    db: Database,
    coord: Coordinator,
    providers: ProviderRegistry,
    prices: PriceTable,
    master_key: MasterKey,
    owner: str,
    tools: Iterable[Tool] | None = None,
    toolsets: Iterable[Toolset] = (),
    hooks: Iterable[LoopHook] = (),
    services: Mapping[type, object] | None = None,
    extensions: Sequence[ExtensionFactory] = DEFAULT_EXTENSIONS,
) -> Engine:
    """Build the engine: the core services (`Access`, `Tenancy`, `Prompts`, `Inspector`),
    every extension, then the runner, the actor and the reaper. `tools` are the native
    tools (default: the built-ins and every extension's tools); `toolsets`, `hooks` and
    `services` are the caller's, after the extensions' (a caller's service of a type wins)."""
    wakes = Wakes(coord, settings.lease_ttl)
    asks = Asks(db, coord, wakes, settings.lease_ttl)
    kernel = Kernel(settings, db, coord, prices, master_key, wakes, providers=providers,
                    asker=asks)
    built = [make(kernel) for make in extensions]
    native = StaticToolset([*builtin_tools(), *(t for e in built for t in e.tools())]
                           if tools is None else tools)  # checked first
    every_toolset = [native, *toolsets, *(ts for e in built for ts in e.toolsets())]
    core: dict[type, object] = {Access: Access(db, settings), Tenancy: Tenancy(db, master_key),
                                Prompts: Prompts(db), Inspector: Inspector(db),
                                LoginThrottle: LoginThrottle(coord)}
    registry = Services({**core, **{k: v for e in built for k, v in e.services().items()},
                         **(services or {})})
    # Tools outside a turn (the MCP gateway, workflow steps): the same tools and rules.
    registry.add(ToolCalls, ToolCalls(
        db, [t for t in every_toolset if isinstance(t, OrgToolset)],
        timeout=Caps().tool_timeout, result_chars=Caps().tool_result_chars,
        services=registry.mapping(), turn_toolsets=every_toolset))
    cap_groups = tuple(g for e in built for g in e.caps())
    publisher = Publisher(coord)
    foreground = Foreground(settings.requests_first_wait)
    runner = TurnRunner(
        db=db, publisher=publisher, providers=providers, toolsets=every_toolset,
        prices=prices, master_key=master_key, owner=owner, engine_version=ator.__version__,
        budget_fail_closed=settings.budget_fail_closed, cap_ceilings=settings.cap_ceilings,
        hooks=[*(h for e in built for h in e.hooks()), *hooks],
        services=registry.mapping(), context=ContextPolicy.from_settings(settings),
        ends=[end for e in built for end in e.ends()],
        fields=[f for e in built for f in e.fields()], cap_groups=cap_groups,
        foreground=foreground,
    )
    actor = Actor(db=db, coord=coord, runner=runner, owner=owner,
                  lease_ttl=settings.lease_ttl, max_in_flight=settings.max_turns_in_flight,
                  wakes=wakes)
    # Jobs (ator.jobs): every extension's kinds, a queue and schedules as services, and the
    # runner `Ator.start_jobs` starts (`ator worker`; `ator serve` unless told not to).
    kinds = JobKinds()
    for kind in (k for e in built for k in e.job_kinds()):
        kinds.register(kind)
    registry.add(JobKinds, kinds)
    registry.add(JobQueue, JobQueue(db, kinds))
    registry.add(Schedules, Schedules(db, kinds))
    # Model calls outside a turn (an extension's own, e.g. analyses, wins).
    registry.add(ModelWork, ModelWork(db, providers, prices, master_key,
                                      fail_closed=settings.budget_fail_closed))
    job_runner = JobRunner(db, kinds, settings, owner=owner)
    for extension in built:  # every service exists now
        extension.bound(registry)
    reaper = Reaper(db=db, coord=coord, actor=actor, runner=runner, owner=owner,
                    ttl=settings.lease_ttl, interval=settings.reaper_interval)
    return Engine(
        kernel=kernel, extensions=built, services=registry, cap_groups=cap_groups,
        publisher=publisher, runner=runner, actor=actor, reaper=reaper,
        job_runner=job_runner, asks=asks, foreground=foreground,
        routes=[r for e in built for r in e.routes()],
        rooms=[r for e in built for r in e.rooms()],
        migrations=[m for e in built for m in e.migrations()],
    )
