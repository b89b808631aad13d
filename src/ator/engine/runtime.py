"""`Ator`: the Python API of the runtime (layer: engine; imports store, coord, providers,
tools, cost, security, jobs, engine.*).

The HTTP API and the CLI sit on this class, the one public facade: conversations and their
records are its methods, every other service is reached through `service(Kind)`, and every
method that touches tenant data takes a `Scope`. What it serves is assembled by the
composition root (`engine/root.py`) from extensions (MCP and subagents by default).

    async with await Ator.open(settings) as ator:
        org = await ator.create_org("acme")
        scope = Scope(org.id)
        setup = await ator.create_setup(scope, name="default", provider="anthropic",
                                        model="claude-sonnet-4-5")
        thread = await ator.create_thread(scope, setup.id)
        result = await ator.ask(scope, thread.id, "Hello")
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, TypeVar
from uuid import UUID

from ator import jsonenc
from ator.agent.hooks import LoopHook
from ator.coord import coordinator_from_url
from ator.coord.base import Coordinator
from ator.cost.prices import PriceTable
from ator.engine import run_stream, stream
from ator.engine.actor import lease_key
from ator.engine.asks import TurnResult
from ator.engine.mcp import McpService
from ator.engine.publish import want_deltas
from ator.engine.root import DEFAULT_EXTENSIONS, Engine, ExtensionFactory, assemble
from ator.engine.stream import ThreadFollow
from ator.engine.tenancy import Tenancy
from ator.engine.wire import delta_channel
from ator.errors import ConfigError, Conflict, EgressBlocked
from ator.obs.looplag import LoopLag
from ator.providers.base import Provider
from ator.providers.config import ConfigPolicy, ProviderConfig
from ator.providers.registry import ProviderRegistry
from ator.security.crypto import MasterKey, load_or_create_key_file
from ator.security.limits import check_message, refuse
from ator.security.redact import restore_redacted
from ator.settings import Settings
from ator.store import events as event_store
from ator.store import setups as setup_store
from ator.store import threads as thread_store
from ator.store import tree as tree_store
from ator.store import turns as turn_store
from ator.store.database import Database, open_database
from ator.store.records import Event, MailboxItem, Org, Setup, Thread, TreeNode, Turn
from ator.store.scope import Scope
from ator.subagents.service import Subagents
from ator.tools.base import Tool
from ator.tools.policy import parse_tool_policy
from ator.tools.toolset import StaticToolset, Toolset

__all__ = ["Ator", "Stopped", "TurnResult"]

_MAX_TEXT = 100_000
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Stopped:
    """What a stop did: whether the thread's own turn was running, and how many of its
    descendants (subagents at any depth, not already stopped) were stopped with it."""

    running: bool
    descendants: int


class Ator:
    """The one public facade: conversations and their records here, every other service
    through `service(Kind)`. Built by `Ator.open` from the composition root
    (`engine/root.py`), which assembles the engine from its extensions."""

    def __init__(
        self,
        settings: Settings,
        *,
        db: Database,
        coord: Coordinator,
        providers: ProviderRegistry,
        prices: PriceTable,
        master_key: MasterKey,
        engine: Engine,
    ) -> None:
        self.settings = settings
        self.db = db
        self.coord = coord
        self.providers = providers
        self.prices = prices
        self.master_key = master_key
        self.engine = engine
        self.publisher = engine.publisher
        self.runner = engine.runner
        self.actor = engine.actor
        self.reaper = engine.reaper
        self.foreground = engine.foreground  # counted by the HTTP API (api.first)
        # New messages take at most half the database pool: under a burst, accepted turns
        # start, stream and finish ahead of further arrivals instead of queueing behind them
        # for a connection (backpressure lands on the POST, not on work already accepted).
        self._ingest = asyncio.Semaphore(max(1, settings.db_pool_size // 2))
        self.loop_lag = LoopLag()
        self._engine_started = False

    def service(self, kind: type[T]) -> T:
        """The engine's service of type `kind` (`Access`, `Tenancy`, `Prompts`,
        `Inspector`, an extension's: `Subagents`, `McpServers`, …). Raises ConfigError when
        the engine has none."""
        return self.engine.services.get(kind)

    def routes(self) -> list[Any]:
        """The routers the engine's extensions contribute (`Extension.routes()`), for the
        HTTP API to mount."""
        return list(self.engine.routes)

    @classmethod
    async def open(
        cls,
        settings: Settings | None = None,
        *,
        providers: Mapping[str, Provider] | None = None,
        tools: Iterable[Tool] | None = None,
        toolsets: Iterable[Toolset] = (),
        hooks: Iterable[LoopHook] = (),
        services: Mapping[type, object] | None = None,
        prices: PriceTable | None = None,
        coordinator: Coordinator | None = None,
        engine: bool = True,
        extensions: Sequence[ExtensionFactory] = DEFAULT_EXTENSIONS,
    ) -> Ator:
        """Connect (or start the embedded database), migrate, and start the engine.

        `tools` are the native tools every turn may use (default: the built-ins and every
        extension's, e.g. the subagent tools; a caller that names its tools adds
        `subagent_tools()` to delegate);
        `toolsets` add tools asked for per turn; `hooks` run around every model call;
        `services` are what tools may reach through `ToolContext.service`;
        `extensions` build the features (default: MCP and subagents).
        `engine=False` gives a client that can write and read but runs no turns and no
        reaper (e.g. an admin command)."""
        settings = settings or Settings()
        if tools is not None:  # a bad tool list is refused before anything is opened
            tools = list(tools)
            StaticToolset(tools)
        if settings.master_key is not None:
            key = MasterKey.from_b64(settings.master_key.get_secret_value())
        else:
            key = await asyncio.to_thread(load_or_create_key_file,
                                          settings.data_dir / "master.key")
        db = await open_database(settings)
        try:
            coord = coordinator or coordinator_from_url(
                settings.redis_url, prefix=settings.redis_prefix,
                pool_size=settings.redis_pool_size,
                request_pool_size=settings.redis_request_pool_size,
                pool_timeout=settings.redis_pool_timeout,
            )
        except BaseException:
            await db.close()
            raise
        registry = ProviderRegistry(settings, providers)
        price_table = prices or PriceTable.from_settings(settings)
        built = assemble(
            settings, db=db, coord=coord, providers=registry, prices=price_table,
            master_key=key, owner=settings.owner_id or f"{socket.gethostname()}:{os.getpid()}",
            tools=tools, toolsets=toolsets, hooks=hooks,
            services=services, extensions=extensions)
        self = cls(settings, db=db, coord=coord, providers=registry, prices=price_table,
                   master_key=key, engine=built)
        if engine:
            try:
                await self.start_engine()
            except BaseException:
                await self.close()  # nothing half-open survives a failed start
                raise
        return self

    @property
    def owner(self) -> str:
        return self.runner.owner

    async def start_engine(self) -> None:
        if not self._engine_started:
            # Import the provider SDKs in a worker thread now: the first model call would
            # otherwise import them on the event loop (~1 s frozen for every tenant).
            await self.providers.preload()
            for extension in self.engine.extensions:
                await extension.start()
            await self.publisher.start()
            await self.actor.start()
            self.reaper.start()
            self.loop_lag.start()
            self._engine_started = True

    async def start_jobs(self) -> None:
        """Run jobs and schedules in this process (`ator worker`; `ator serve` unless
        run_jobs is off). close() finishes or hands back what they hold."""
        await self.engine.job_runner.start()

    async def close(self) -> None:
        """Stop the engine and close every resource. One part failing does not leave the
        others open; the first failure is raised after all were tried."""
        steps = [*(e.aclose for e in reversed(self.engine.extensions)),
                 self.providers.aclose, self.publisher.aclose, self.coord.close,
                 self.db.close]
        if self._engine_started:
            steps = [self.loop_lag.close, self.reaper.close, self.actor.close, *steps]
            self._engine_started = False
        steps = [self.engine.job_runner.close, *steps]
        failure: BaseException | None = None
        for step in steps:
            try:
                await step()
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    async def ready(self) -> dict[str, bool]:
        """What a readiness probe needs: the database, the coordinator, and (with the engine
        running) the stop listener that makes stops from other replicas reach this one."""
        checks = {"database": False, "coordinator": False}
        with contextlib.suppress(Exception):
            checks["database"] = await self.db.ping()
        with contextlib.suppress(Exception):
            checks["coordinator"] = await self.coord.ping()
        if self._engine_started:
            checks["stop_listener"] = self.actor.listening
            checks["event_loop"] = self.loop_lag.lag <= self.settings.max_loop_lag
        return checks

    def load(self) -> dict[str, float]:
        """This process's load, for readiness and /metrics: turns in flight (admitted
        pumps), threads waiting for a slot, and event-loop lag in seconds."""
        return {"turns_in_flight": self.actor.admission.in_flight,
                "turns_limit": self.actor.admission.limit,
                "turns_waiting": self.actor.admission.waiting,
                "loop_lag_s": round(self.loop_lag.lag, 4)}

    async def metrics_text(self) -> bytes:
        """This process's metrics in the Prometheus text format, with the gauges read now
        (mailbox depth and lag, load, the coordinator hub's waiters and channels)."""
        m = self.runner.metrics
        tenancy = self.service(Tenancy)
        m.mailbox_depth.set(await tenancy.mailbox_depth())
        m.mailbox_lag.set(await tenancy.mailbox_lag())
        load = self.load()
        m.turns_in_flight.set(load["turns_in_flight"])
        m.turns_waiting.set(load["turns_waiting"])
        m.loop_lag.set(load["loop_lag_s"])
        m.hub_waiters.set(self.coord.hub.waiters)
        m.hub_channels.set(self.coord.hub.channels)
        return m.render()

    async def __aenter__(self) -> Ator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # Tenancy and configuration ---------------------------------------------------------

    async def create_org(
        self, name: str, *, monthly_budget_usd: Decimal | None = None,
        budget_ceiling_usd: Decimal | None = None,
    ) -> Org:
        return await self.service(Tenancy).create_org(
            name, monthly_budget_usd=monthly_budget_usd, budget_ceiling_usd=budget_ceiling_usd)

    async def set_org_caps(self, scope: Scope, caps: dict[str, Any]) -> None:
        """Set the org's subagent tree caps (`Subagents.set_org_caps`)."""
        await self.service(Subagents).set_org_caps(scope, caps)

    async def put_secret(self, scope: Scope, name: str, value: str) -> None:
        await self.service(Tenancy).put_secret(scope, name, value)

    def validate_setup(
        self,
        provider: str,
        config: Mapping[str, Any] | None,
        tool_policy: Mapping[str, Any] | None = None,
        *,
        model: str | None = None,
    ) -> ProviderConfig:
        """Check a setup's provider, config (`providers.config`), caps and tool policy as
        they would be stored, and (given the `model`) what its provider refuses to run (a
        CLI runtime: the model id's pattern, the CLI installed and logged in). Raises
        ValidationFailed (422, field path in `errors`) or Forbidden (403
        `tenant_endpoints_disabled`)."""
        parsed = self.providers.parse_config(provider, config,
                                             ConfigPolicy.from_settings(self.settings))
        if model is not None:
            self.providers.check_setup(provider, model, parsed)
        try:
            self.engine.check_caps(parsed.caps)
        except ConfigError as exc:
            code = exc.code if exc.code != ConfigError.code else "invalid_cap"
            raise refuse(("config", "caps"), exc.message, code) from None
        base_url = getattr(parsed, "base_url", None)
        if base_url:
            try:  # a private or non-https endpoint is refused now, not at the first turn
                self.providers.check_endpoint(str(base_url))
            except EgressBlocked as exc:
                raise refuse(("config", "base_url"), exc.message, exc.code) from None
        if tool_policy is not None:
            parse_tool_policy(tool_policy)
        return parsed

    async def create_setup(
        self,
        scope: Scope,
        *,
        name: str,
        provider: str,
        model: str,
        persona: str = "",
        config: dict[str, Any] | None = None,
        tool_policy: dict[str, Any] | None = None,
    ) -> Setup:
        self.validate_setup(provider, config, tool_policy, model=model)
        return await setup_store.create_setup(
            self.db, scope, name=name, provider=provider, model=model, persona=persona,
            config=config, tool_policy=tool_policy,
        )

    async def update_setup(self, scope: Scope, setup_id: UUID, **changes: Any) -> Setup:
        """Apply `changes` (name, provider, model, persona, config, tool_policy; None
        leaves a field as it is) after validating the setup as it would then be, exactly as
        `create_setup` does. A "[redacted]" in `config` keeps the stored value at that path,
        so a config sent back as GET returned it is accepted unchanged. A concurrent update
        makes it re-read and re-validate (Conflict `setup_changed` after 3 tries)."""
        for _ in range(3):
            current = await setup_store.get_setup(self.db, scope, setup_id)
            wanted = {k: v for k, v in changes.items() if v is not None}
            if "config" in wanted:
                wanted["config"] = restore_redacted(wanted["config"], current.config)
            self.validate_setup(wanted.get("provider", current.provider),
                                wanted.get("config", current.config),
                                wanted.get("tool_policy"),
                                model=wanted.get("model", current.model))
            try:
                updated = await setup_store.update_setup(
                    self.db, scope, setup_id, expected_version=current.version, **wanted)
            except Conflict:
                continue
            # Its tool policy may change: the gated tools' cache of it goes.
            self.service(McpService).gated.recent.drop((scope.org_id, setup_id))
            return updated
        raise Conflict("the setup kept changing while this update was validated; retry",
                       code="setup_changed")

    async def create_thread(
        self,
        scope: Scope,
        setup_id: UUID,
        *,
        title: str = "",
        instructions: str = "",
        metadata: dict[str, Any] | None = None,
    ) -> Thread:
        return await thread_store.create_thread(
            self.db, scope, setup_id, title=title, instructions=instructions, metadata=metadata
        )

    async def setup(self, scope: Scope, setup_id: UUID) -> Setup:
        return await setup_store.get_setup(self.db, scope, setup_id)

    async def setups(self, scope: Scope, *, include_archived: bool = False) -> list[Setup]:
        return await setup_store.list_setups(self.db, scope, include_archived=include_archived)

    async def archive_setup(self, scope: Scope, setup_id: UUID) -> Setup:
        return await setup_store.archive_setup(self.db, scope, setup_id)

    async def thread(self, scope: Scope, thread_id: UUID) -> Thread:
        """The thread, or NotFound (another org's thread is not found either)."""
        return await thread_store.get_thread(self.db, scope, thread_id)

    async def threads(
        self, scope: Scope, *, limit: int = 50, before: tuple[datetime, UUID] | None = None,
        setup_id: UUID | None = None, parent_id: UUID | None = None, roots_only: bool = False,
    ) -> list[Thread]:
        """Newest first; `before` is the (created_at, id) of the last thread of a page;
        `roots_only` leaves subagent threads out."""
        return await thread_store.list_threads(self.db, scope, limit=limit, before=before,
                                               setup_id=setup_id, parent_id=parent_id,
                                               roots_only=roots_only)

    async def delete_thread(self, scope: Scope, thread_id: UUID) -> None:
        await thread_store.delete_thread(self.db, scope, thread_id)

    # Conversation ----------------------------------------------------------------------

    async def submit(
        self,
        scope: Scope,
        thread_id: UUID,
        text: str,
        *,
        client_message_id: str | None = None,
    ) -> tuple[MailboxItem, bool]:
        """Put a user message in the thread's mailbox and wake the thread.

        Idempotent per `client_message_id`: a resend returns the first item and
        `created=False`, and runs nothing. Returns (item, created)."""
        check_message(text, client_message_id)  # the one rule, whatever the transport
        cmid = client_message_id or uuid.uuid4().hex
        async with self._ingest:
            return await self.engine.asks.submit(scope, thread_id, text, cmid)

    async def busy(self, thread_id: UUID) -> bool:
        """Whether some replica holds the thread's lease (a turn is running)."""
        return await self.coord.holder(lease_key(thread_id)) is not None

    async def busy_many(self, thread_ids: Sequence[UUID]) -> list[bool]:
        """`busy` of each thread (a page of a thread list), asked concurrently."""
        return list(await asyncio.gather(*(self.busy(t) for t in thread_ids)))

    async def stop(self, scope: Scope, thread_id: UUID, reason: str = "user") -> Stopped:
        """Abort the thread's running turn, on whichever replica runs it, and stop its
        subtree. Says whether a turn was running (some replica held the thread's lease; an
        idle thread gets no abort, so a turn that starts later is not stopped by it) and how
        many descendants were stopped. Raises NotFound (another org's)."""
        await thread_store.get_thread(self.db, scope, thread_id)  # 404 for another org
        # Its subagents stop with it, wherever they run; their results are dropped.
        below = await self.service(Subagents).cascade(scope, thread_id, reason)
        if await self.coord.holder(lease_key(thread_id)) is None:
            return Stopped(running=False, descendants=len(below))
        await self.actor.stop(thread_id, reason)
        return Stopped(running=True, descendants=len(below))

    async def tree(self, scope: Scope, thread_id: UUID) -> list[TreeNode]:
        """The thread and its subagents, parents first, each with status, steps, tokens,
        USD and whether a turn runs now. Raises NotFound (another org's thread)."""
        return await tree_store.tree(self.db, scope, thread_id)

    async def events(
        self, scope: Scope, thread_id: UUID, *, after_seq: int = 0, limit: int = 200
    ) -> list[Event]:
        return await event_store.read_events(self.db, scope, thread_id, after_seq=after_seq,
                                             limit=limit)

    async def events_before(
        self, scope: Scope, thread_id: UUID, *, before: int, limit: int = 200
    ) -> tuple[list[Event], bool]:
        """The last `limit` events below seq `before` (in seq order) and whether older ones
        exist. Raises NotFound (another org's thread)."""
        await thread_store.get_thread(self.db, scope, thread_id)
        return await event_store.read_events_before(self.db, scope, thread_id, before=before,
                                                    limit=limit)

    async def wait_events(
        self, scope: Scope, thread_id: UUID, *, after_seq: int, timeout: float, limit: int = 200
    ) -> list[dict[str, Any]]:
        """Long-poll: the frames (engine.wire) of the events after `after_seq`, waiting up to
        `timeout` seconds for the next commit. Returns [] on timeout. Waits on the
        coordinator's shared subscription (one connection per process, whatever the number
        of waiters). Raises NotFound (another org's thread)."""
        await thread_store.get_thread(self.db, scope, thread_id)
        async with ThreadFollow(self.db, self.coord, scope, thread_id, after_seq=after_seq,
                                inbox=16) as reader:
            return await stream.wait_frames(reader, timeout=timeout, limit=limit)

    async def wait_run_events(self, scope: Scope, run_id: UUID, *, after_seq: int,
                              timeout: float, limit: int = 200) -> list[dict[str, Any]]:
        """`wait_events` for a workflow run's event log (frames of engine.run_stream).
        Raises NotFound (another org's run)."""
        await run_stream.check_run(self.db, scope, run_id)
        async with run_stream.RunFollow(self.db, self.coord, scope, run_id,
                                        after_seq=after_seq, inbox=16) as reader:
            return await stream.wait_frames(reader, timeout=timeout, limit=limit)

    async def run_frames(self, scope: Scope, run_id: UUID, *, after_seq: int = 0,
                         keepalive: float | None = None
                         ) -> AsyncGenerator[dict[str, Any] | None, None]:
        """A workflow run's event frames after `after_seq`, replayed then live (None after
        `keepalive` quiet seconds). Raises NotFound (another org's run) before streaming."""
        return await run_stream.run_frames(self.db, self.coord, scope, run_id,
                                           after_seq=after_seq, keepalive=keepalive)

    async def turn(self, scope: Scope, turn_id: UUID) -> Turn:
        return await turn_store.get_turn(self.db, scope, turn_id)

    async def turns(self, scope: Scope, thread_id: UUID, *, limit: int = 50) -> list[Turn]:
        return await turn_store.list_turns(self.db, scope, thread_id, limit=limit)

    async def ask(
        self,
        scope: Scope,
        thread_id: UUID,
        text: str,
        *,
        client_message_id: str | None = None,
        timeout: float = 600.0,
    ) -> TurnResult:
        """Submit and wait for the turn that takes the message to end (on any replica).

        Follows the coordinator's notices of committed events (no polling); if none arrive
        for a lease TTL, it catches up from the database, from the message's own event."""
        async def submit(scope: Scope, thread_id: UUID, text: str,
                         cmid: str) -> tuple[MailboxItem, bool]:
            return await self.submit(scope, thread_id, text, client_message_id=cmid)

        return await self.engine.asks.ask(
            scope, thread_id, text, client_message_id=client_message_id or uuid.uuid4().hex,
            timeout=timeout, submit=submit)

    # Facades for the transports --------------------------------------------------------
    # SSE, the socket gateway, the CLI and /metrics reach the database, the coordinator and
    # the runner only through these (import-linter cannot see an attribute reached through).

    async def thread_frames(
        self, scope: Scope, thread_id: UUID, *, after_seq: int = 0, deltas: bool = True,
        keepalive: float | None = None,
    ) -> AsyncGenerator[dict[str, Any] | None, None]:
        """engine.stream.thread_frames of this runtime. Raises NotFound (another org's)."""
        return await stream.thread_frames(self.db, self.coord, scope, thread_id,
                                          after_seq=after_seq, deltas=deltas,
                                          keepalive=keepalive)

    async def open_feed(self, scope: Scope, thread_id: UUID, *, recheck: float
                        ) -> tuple[int, AsyncGenerator[dict[str, Any] | None, None]]:
        """engine.stream.open_feed of this runtime. Raises NotFound (another org's)."""
        return await stream.open_feed(self.db, self.coord, scope, thread_id, recheck=recheck)

    def resume_feed(self, scope: Scope, thread_id: UUID, *, after_seq: int, recheck: float
                    ) -> AsyncGenerator[dict[str, Any] | None, None]:
        return stream.resume_feed(self.db, self.coord, scope, thread_id, after_seq=after_seq,
                                  recheck=recheck)

    async def read_frames(self, scope: Scope, thread_id: UUID, *, after_seq: int,
                          limit: int = 500, check: bool = False) -> list[dict[str, Any]]:
        """engine.stream.read_frames of this runtime."""
        return await stream.read_frames(self.db, scope, thread_id, after_seq=after_seq,
                                        limit=limit, check=check)

    @asynccontextmanager
    async def deltas(self, thread_id: UUID) -> AsyncIterator[AsyncIterator[list[dict[str, Any]]]]:
        """The thread's token deltas from now on, as they are published (batches of
        engine.wire deltas), while inside the block."""
        async with self.coord.subscribe(delta_channel(thread_id)) as sub:
            await want_deltas(self.coord, thread_id)
            yield (jsonenc.loads(message) async for _channel, message in sub)

    async def count_hit(self, key: str, window: float) -> int:
        """Count one hit on `key` in the current `window` seconds, across replicas (rate
        limits); returns the window's count so far."""
        return await self.coord.hit(key, window)
