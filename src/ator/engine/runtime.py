"""`Ator`: the Python API of the runtime (layer: engine; imports store, coord, providers,
tools, cost, security, engine.*).

The HTTP API and the CLI sit on this class. It owns the database, the coordinator, the thread
actor and the reaper, and every method that touches tenant data takes a `Scope`.

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
import json
import os
import socket
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from uuid import UUID

import ator
from ator.agent.caps import Caps
from ator.coord import coordinator_from_url
from ator.coord.base import Coordinator, Subscription
from ator.cost.prices import PriceTable
from ator.engine.actor import Actor, lease_key
from ator.engine.reaper import Reaper
from ator.engine.turn import TurnRunner, thread_channel
from ator.errors import ValidationFailed
from ator.providers.base import Provider
from ator.providers.registry import ProviderRegistry
from ator.security.crypto import MasterKey, load_or_create_key_file
from ator.security.redact import is_secret_key
from ator.settings import Settings
from ator.store import events as event_store
from ator.store import mailbox as mailbox_store
from ator.store import orgs as org_store
from ator.store import secrets as secret_store
from ator.store import setups as setup_store
from ator.store import threads as thread_store
from ator.store import turns as turn_store
from ator.store.database import Database, open_database
from ator.store.records import Event, MailboxItem, Org, Setup, Thread, Turn
from ator.store.scope import Scope
from ator.tools.base import Tool
from ator.tools.builtin import builtin_tools
from ator.tools.registry import ToolRegistry

__all__ = ["Ator", "TurnResult"]

_MAX_TEXT = 100_000


@dataclass
class TurnResult:
    """How a turn ended, as seen by the caller that asked."""

    turn_id: UUID
    status: str
    stop_reason: str
    text: str
    usage: dict[str, Any]
    cost_usd: Decimal
    events: list[dict[str, Any]] = field(default_factory=list)


def _check_no_clear_secrets(value: Any, path: str = "config") -> None:
    """Configs may hold secret *references* only; a clear credential is refused."""
    if isinstance(value, dict):
        for k, v in value.items():
            where = f"{path}.{k}"
            if is_secret_key(str(k)) and isinstance(v, str) and v and not v.startswith("secret:"):
                raise ValidationFailed(
                    f"{where} looks like a credential; store it with put_secret and reference "
                    "it as 'secret:NAME'",
                    code="secret_in_config",
                )
            _check_no_clear_secrets(v, where)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_no_clear_secrets(v, f"{path}[{i}]")


class Ator:
    def __init__(
        self,
        settings: Settings,
        *,
        db: Database,
        coord: Coordinator,
        providers: ProviderRegistry,
        tools: ToolRegistry,
        prices: PriceTable,
        master_key: MasterKey,
    ) -> None:
        self.settings = settings
        self.db = db
        self.coord = coord
        self.providers = providers
        self.tools = tools
        self.prices = prices
        self.master_key = master_key
        self.owner = settings.owner_id or f"{socket.gethostname()}:{os.getpid()}"
        self.runner = TurnRunner(
            db=db, coord=coord, providers=providers, tools=tools, prices=prices,
            master_key=master_key, owner=self.owner, engine_version=ator.__version__,
            budget_fail_closed=settings.budget_fail_closed,
        )
        self.actor = Actor(db=db, coord=coord, runner=self.runner, owner=self.owner,
                           lease_ttl=settings.lease_ttl)
        self.reaper = Reaper(db=db, coord=coord, actor=self.actor, runner=self.runner,
                             owner=self.owner, ttl=settings.lease_ttl,
                             interval=settings.reaper_interval)
        self._engine_started = False

    @classmethod
    async def open(
        cls,
        settings: Settings | None = None,
        *,
        providers: Mapping[str, Provider] | None = None,
        tools: Iterable[Tool] | None = None,
        prices: PriceTable | None = None,
        coordinator: Coordinator | None = None,
        engine: bool = True,
    ) -> Ator:
        """Connect (or start the embedded database), migrate, and start the engine.

        `engine=False` gives a client that can write and read but runs no turns and no
        reaper (e.g. an admin command)."""
        settings = settings or Settings()
        db = await open_database(settings)
        coord = coordinator or coordinator_from_url(
            settings.redis_url, prefix=settings.redis_prefix,
            pool_size=settings.redis_pool_size,
            request_pool_size=settings.redis_request_pool_size,
            pool_timeout=settings.redis_pool_timeout,
        )
        if settings.master_key is not None:
            key = MasterKey.from_b64(settings.master_key.get_secret_value())
        else:
            key = await asyncio.to_thread(load_or_create_key_file,
                                          settings.data_dir / "master.key")
        self = cls(
            settings, db=db, coord=coord,
            providers=ProviderRegistry(settings, providers),
            tools=ToolRegistry(builtin_tools() if tools is None else tools),
            prices=prices or PriceTable(), master_key=key,
        )
        if engine:
            await self.start_engine()
        return self

    async def start_engine(self) -> None:
        if not self._engine_started:
            await self.actor.start()
            self.reaper.start()
            self._engine_started = True

    async def close(self) -> None:
        if self._engine_started:
            await self.reaper.close()
            await self.actor.close()
        await self.providers.aclose()
        await self.coord.close()
        await self.db.close()

    async def __aenter__(self) -> Ator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # Tenancy and configuration ---------------------------------------------------------

    async def create_org(self, name: str, *, monthly_budget_usd: Decimal | None = None) -> Org:
        return await org_store.create_org(self.db, name, monthly_budget_usd=monthly_budget_usd)

    async def set_budget(self, scope: Scope, monthly_budget_usd: Decimal | None) -> Org:
        return await org_store.set_org_budget(self.db, scope, monthly_budget_usd)

    async def put_secret(self, scope: Scope, name: str, value: str) -> None:
        await secret_store.put_secret(self.db, self.master_key, scope, name, value)

    def validate_setup(self, provider: str, config: Mapping[str, Any] | None) -> None:
        if provider not in self.providers.known():
            raise ValidationFailed(
                f"unknown provider {provider!r}; known: {', '.join(self.providers.known())}",
                code="unknown_provider",
            )
        config = dict(config or {})
        _check_no_clear_secrets(config)
        Caps.from_config(config.get("caps"))

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
        self.validate_setup(provider, config)
        return await setup_store.create_setup(
            self.db, scope, name=name, provider=provider, model=model, persona=persona,
            config=config, tool_policy=tool_policy,
        )

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
        if not text.strip():
            raise ValidationFailed("message text is empty", code="empty_message")
        if len(text) > _MAX_TEXT:
            raise ValidationFailed(f"message text exceeds {_MAX_TEXT} characters",
                                   code="message_too_long")
        cmid = client_message_id or uuid.uuid4().hex
        item, created = await mailbox_store.submit(
            self.db, scope, thread_id, client_message_id=cmid, kind="message",
            content={"role": "user", "content": [{"type": "text", "text": text}]},
        )
        if created:
            await self.actor.notify(scope, thread_id)
        return item, created

    async def busy(self, thread_id: UUID) -> bool:
        """Whether some replica holds the thread's lease (a turn is running)."""
        return await self.coord.holder(lease_key(thread_id)) is not None

    async def stop(self, scope: Scope, thread_id: UUID, reason: str = "user") -> bool:
        """Abort the thread's running turn, on whichever replica runs it. Returns whether
        one was running (some replica held the thread's lease); an idle thread gets no abort,
        so a turn that starts later is not stopped by it. Raises NotFound (another org's)."""
        await thread_store.get_thread(self.db, scope, thread_id)  # 404 for another org
        if await self.coord.holder(lease_key(thread_id)) is None:
            return False
        await self.actor.stop(thread_id, reason)
        return True

    async def events(
        self, scope: Scope, thread_id: UUID, *, after_seq: int = 0, limit: int = 200
    ) -> list[Event]:
        return await event_store.read_events(self.db, scope, thread_id, after_seq=after_seq,
                                             limit=limit)

    async def wait_events(
        self, scope: Scope, thread_id: UUID, *, after_seq: int, timeout: float, limit: int = 200
    ) -> list[Event]:
        """Long-poll: events after `after_seq`, waiting up to `timeout` seconds for the next
        commit. Returns [] on timeout. Waits on the coordinator's shared subscription (one
        connection per process, whatever the number of waiters)."""
        await thread_store.get_thread(self.db, scope, thread_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with self.coord.hub.subscribe(thread_channel(thread_id), inbox=16) as waiter:
            # Subscribed first, then read: a commit in between is in the read or the inbox.
            found = await self.events(scope, thread_id, after_seq=after_seq, limit=limit)
            if found:
                return found
            dropped = 0
            while (left := deadline - loop.time()) > 0:
                message = await waiter.get(left)
                if message is None:
                    break
                # A notice of a later commit, or notices lost to a full inbox: read the truth.
                if waiter.dropped != dropped or json.loads(message).get("seq", 0) > after_seq:
                    dropped = waiter.dropped
                    found = await self.events(scope, thread_id, after_seq=after_seq,
                                              limit=limit)
                    if found:
                        return found
        return []

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

        Waits on the coordinator's notices (no polling); if notices stop arriving for a lease
        TTL, it checks the database once in case one was lost."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with self.coord.subscribe(thread_channel(thread_id)) as sub:
            item, _created = await self.submit(scope, thread_id, text,
                                               client_message_id=client_message_id)
            waiter = _TurnWaiter(str(item.id))
            async with _Inbox(sub) as inbox:
                while waiter.result is None:
                    left = deadline - loop.time()
                    if left <= 0:
                        raise TimeoutError(f"no reply within {timeout:g}s")
                    message = await inbox.get(min(left, self.settings.lease_ttl))
                    if message is None:
                        await waiter.check_database(self, scope, thread_id)
                    else:
                        waiter.feed(json.loads(message))
            return waiter.result


class _Inbox:
    """Reads a subscription into a queue, so waiting with a timeout never cancels the
    subscription's own iterator."""

    def __init__(self, sub: Subscription) -> None:
        self._sub = sub
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> _Inbox:
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _read(self) -> None:
        async for _channel, message in self._sub:
            self._queue.put_nowait(message)

    async def get(self, timeout: float) -> str | None:
        try:
            return await asyncio.wait_for(self._queue.get(), timeout)
        except TimeoutError:
            return None


class _TurnWaiter:
    """Follows thread notices until the turn that drained `mailbox_id` ends."""

    def __init__(self, mailbox_id: str) -> None:
        self.mailbox_id = mailbox_id
        self.turn_id: str | None = None
        self.collected: list[dict[str, Any]] = []
        self.result: TurnResult | None = None

    def feed(self, notice: dict[str, Any]) -> None:
        for ev in notice.get("events", []):
            data = ev["data"]
            if self.turn_id is None:
                if ev["kind"] == "message" and data.get("mailbox_id") == self.mailbox_id:
                    self.turn_id = ev["turn_id"]
                    self.collected = []
                continue
            if ev.get("turn_id") != self.turn_id and data.get("turn_id") != self.turn_id:
                continue
            self.collected.append(ev)
            if ev["kind"] == "turn_ended" and data.get("turn_id") == self.turn_id:
                self._finish(data)

    def _finish(self, data: dict[str, Any]) -> None:
        assert self.turn_id is not None
        texts = [
            b["text"]
            for ev in self.collected if ev["kind"] == "assistant"
            for b in ev["data"].get("content", []) if b.get("type") == "text"
        ]
        self.result = TurnResult(
            turn_id=UUID(self.turn_id), status=str(data.get("status")),
            stop_reason=str(data.get("stop_reason")), text="\n".join(texts),
            usage=dict(data.get("usage") or {}), cost_usd=Decimal(str(data.get("cost_usd", "0"))),
            events=self.collected,
        )

    async def check_database(self, ator: Ator, scope: Scope, thread_id: UUID) -> None:
        """Recover from a lost notice by reading what was committed."""
        events = await ator.events(scope, thread_id, limit=10_000)
        self.turn_id = None
        notice = {"events": [
            {"seq": e.seq, "kind": e.kind, "data": e.data,
             "turn_id": str(e.turn_id) if e.turn_id else None}
            for e in events
        ]}
        self.feed(notice)
        # Not started or not ended yet: keep following live notices.
