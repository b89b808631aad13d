"""What a feature contributes to the engine, and what it is built with (layer: agent; imports
agent.caps, agent.hooks, agent.state, coord.base, cost.prices, providers.registry,
security.crypto, settings, store, tools).

One composition root (`engine/root.py`) assembles the engine from extensions. An extension
is built from the `Kernel` (the database, the coordinator, settings, prices, the master key,
a `Waker`, the provider registry for model work outside a turn, and an `Asker` that runs a
turn and waits for it) and contributes any of:

- `tools()`        native tools (in the default native set when the caller names none)
- `toolsets()`     toolsets asked before every model call
- `hooks()`        loop hooks (`agent/hooks.py`)
- `ends()`         turn-end parts (`TurnEnd`): added to a turn's final write
- `fields()`       per-turn state of its own (`TurnField`): a value read in the turn's
                   start statement, built into an object the turn's context carries
                   (`TurnContext.get(Kind)`); an object that also has `tool_bounds()`
                   narrows the turn's tools, `prompt_layer()` adds a prompt layer,
                   `span_parent()` names the trace the turn's span continues
- `caps()`         caps of its own (`CapGroup`): settable in a setup's `config.caps`,
                   refused when unknown or above their operator ceiling
- `services()`     objects reachable by type: `ToolContext.service(Kind)` in a tool,
                   `Ator.service(Kind)` outside
- `routes()`, `rooms()`, `job_kinds()`, `migrations()`: handed to the transports, the jobs
                   kernel and alembic by whoever assembles them (loosely typed here: this
                   layer does not know their types)
- `bound(services)`: called once every service exists (the extensions' and the core's):
                   an extension that uses another feature's service looks it up here
- `start()`, `aclose()`: with the engine's start and close


Core types name no feature: a feature's fields, caps and services live with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable
from uuid import UUID

from ator.agent.caps import CapGroup
from ator.agent.hooks import LoopHook
from ator.agent.state import TurnContext, TurnState
from ator.coord.base import Coordinator
from ator.cost.prices import PriceTable
from ator.providers.registry import ProviderRegistry
from ator.security.crypto import MasterKey
from ator.settings import Settings
from ator.store import turns as turn_store
from ator.store.database import Database
from ator.store.scope import Scope
from ator.tools.base import Tool
from ator.tools.toolset import Toolset

T = TypeVar("T")

__all__ = ["Asker", "Extension", "Kernel", "Services", "SpanParent", "ToolBounds", "TurnEnd",
           "TurnField", "TurnReply", "Waker"]


class Services(Protocol):
    """The engine's registry of services, by type (engine/root.py `Services`)."""

    def get(self, kind: type[T]) -> T: ...


class Waker(Protocol):
    """What an extension may ask of the thread actor: run a thread that has new mailbox
    items (on some replica), stop a thread's running turn wherever it runs."""

    async def notify(self, scope: Scope, thread_id: UUID) -> None: ...

    async def stop(self, thread_id: UUID, reason: str = "user") -> None: ...


class TurnReply(Protocol):
    """How a turn asked for by `Asker.ask` ended."""

    @property
    def turn_id(self) -> UUID: ...
    @property
    def status(self) -> str: ...
    @property
    def stop_reason(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def usage(self) -> dict[str, Any]: ...
    @property
    def cost_usd(self) -> Decimal: ...
    @property
    def error(self) -> str | None: ...


class Asker(Protocol):
    """Run a turn on a thread and wait for its end (on whichever replica runs it): the
    message is submitted once per `client_message_id` (a resend follows the first's turn)."""

    async def ask(self, scope: Scope, thread_id: UUID, text: str, *, client_message_id: str,
                  timeout: float = 600.0) -> TurnReply: ...


@dataclass(frozen=True, slots=True)
class Kernel:
    """What every extension is built with."""

    settings: Settings
    db: Database
    coord: Coordinator
    prices: PriceTable
    master_key: MasterKey
    waker: Waker
    # The engine's providers, for model calls outside a turn (jobs/model_work.py); None
    # only in a kernel built without an engine.
    providers: ProviderRegistry | None = None
    asker: Asker | None = None


class TurnEnd(Protocol):
    """Something a feature adds to a turn's final write, and does once it committed."""

    def parts(self, turn: TurnContext, state: TurnState,
              finish: turn_store.Finished) -> Sequence[turn_store.StepPart]:
        """Parts for the statement that ends the turn ([] to add nothing)."""
        ...

    async def committed(self, turn: TurnContext, write: turn_store.StepWrite) -> None:
        """After the final write committed (not called when the turn was closed elsewhere)."""
        ...


@dataclass(frozen=True, slots=True)
class TurnField:
    """Per-turn state of an extension's own. `sql` is a select expression of the turn's
    start statement (it runs in that one statement, so it adds no round trip): over `t` the
    thread, `s` its setup, `o` its org, or with `over="items"` an aggregate over `d`, the
    mailbox items the turn takes (`store.turns.start_statement` names their columns);
    `build` makes the object the turn carries from its value (None: nothing). `name` must
    be unique among the engine's fields."""

    name: str
    sql: str
    build: Callable[[Any], object | None]
    over: Literal["thread", "items"] = "thread"


@runtime_checkable
class ToolBounds(Protocol):
    """Per-turn state that narrows the turn's tools: each bound is a tool policy
    (`{"allow": [...] | None, "deny": [...]}`) the turn's tools must satisfy besides the
    setup's own. A bound narrows, never widens."""

    def tool_bounds(self) -> Sequence[Mapping[str, Any]]: ...


@runtime_checkable
class SpanParent(Protocol):
    """Per-turn state naming the trace (a W3C `traceparent` from another process) that the
    turn's span continues."""

    def span_parent(self) -> str: ...


class Extension:
    """Base class with empty contributions: override what the feature adds."""

    name: str = "extension"

    def tools(self) -> Sequence[Tool]:
        return ()

    def toolsets(self) -> Sequence[Toolset]:
        return ()

    def hooks(self) -> Sequence[LoopHook]:
        return ()

    def ends(self) -> Sequence[TurnEnd]:
        return ()

    def fields(self) -> Sequence[TurnField]:
        return ()

    def caps(self) -> Sequence[CapGroup]:
        return ()

    def services(self) -> Mapping[type, object]:
        return {}

    def routes(self) -> Sequence[Any]:
        """Routers the HTTP API mounts (FastAPI `APIRouter`s)."""
        return ()

    def rooms(self) -> Sequence[Any]:
        """Socket rooms the realtime gateway serves."""
        return ()

    def job_kinds(self) -> Sequence[Any]:
        """Job kinds for the jobs kernel's registry (`JobKinds.register(kind)`)."""
        return ()

    def migrations(self) -> Sequence[str]:
        """Alembic version directories of the extension's own tables."""
        return ()

    def bound(self, services: Services) -> None:
        """Once every service is registered: look up another feature's services here."""

    async def start(self) -> None:
        """With the engine's start (after the database and coordinator are up)."""

    async def aclose(self) -> None:
        """With the engine's close; must not raise for a resource already closed."""
