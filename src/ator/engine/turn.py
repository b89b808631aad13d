"""Running one turn of a thread (layer: engine; imports agent, providers, tools, store, coord,
cost, security, engine.*).

`TurnRunner.run` is called by the actor while it holds the thread's lease:

  begin turn: read the context and drain *all* pending items into events (1 statement) →
  freeze config → rebuild history from events (from the latest compaction summary on) →
  agent loop, whose step writer persists every model reply and every batch of tool results
  as it completes (1 statement each) → finish with a typed stop reason (folded into the last
  write when the model ended the turn). Before every model call the compaction hook keeps the
  request inside the model's window and the endpoint's body limit (`engine/context_policy.py`
  says which), then the budget gate reserves for it.

Every way a turn can end is typed: the model finished (`done`), a cap or the budget ended it,
a stop, a lost lease or closed row (`TurnLost`), a typed `AtorError`, or any other exception
(`error:internal`, logged with the turn's ids). A turn cut short keeps what the call in
flight streamed, persisted as an interrupted reply and billed at what it consumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from ator.agent.caps import CapCeilings, CapGroup, Caps
from ator.agent.compaction import CompactionHook, Stash
from ator.agent.extension import SpanParent, ToolBounds, TurnEnd, TurnField
from ator.agent.fence import Fence, unfenced
from ator.agent.history import build_messages
from ator.agent.hooks import LoopHook
from ator.agent.loop import Outcome, run_loop
from ator.agent.single_prompt import SinglePromptHook
from ator.agent.state import TurnContext, TurnState, implementing
from ator.context import org_id_var, thread_id_var, turn_id_var
from ator.cost.prices import Priced, PriceTable
from ator.engine.budget import BudgetGate
from ator.engine.config import FrozenConfig, freeze
from ator.engine.context_policy import ContextPolicy
from ator.engine.publish import Publisher
from ator.engine.starts import StartBatcher
from ator.engine.steps import StepWriter, TurnLost
from ator.errors import AtorError, CoordinationError
from ator.foreground import Foreground
from ator.obs import tracing
from ator.obs.logging import get_logger
from ator.obs.metrics import Metrics
from ator.providers.base import Usage
from ator.providers.registry import ProviderRegistry
from ator.security.crypto import MasterKey
from ator.store import mailbox as mailbox_store
from ator.store import provider_state
from ator.store import secrets as secret_store
from ator.store import turns as turn_store
from ator.store.database import Database
from ator.store.events import HISTORY_KINDS
from ator.store.records import Event, MailboxItem
from ator.store.scope import Scope
from ator.tools.base import ToolContext
from ator.tools.results import StoredResults
from ator.tools.toolset import Toolset, TurnTools

__all__ = ["Posting", "TurnHandle", "TurnRunner"]

log = get_logger("ator.engine.turn")


@dataclass
class Posting:
    """A message posted to an idle thread whose lease is held: the statement that starts
    its turn inserts it (`store.turns.post_turn`). `result` resolves once that statement
    has committed, with the item, or None when nothing was inserted (a resend, a thread in
    the trash: the poster then answers as `mailbox.submit` does); or with its error."""

    post: mailbox_store.Post
    result: asyncio.Future[MailboxItem | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())

    def taken(self, item: MailboxItem | None) -> None:
        if not self.result.done():
            self.result.set_result(item)

    def fail(self, exc: BaseException) -> None:
        if self.result.done():
            return
        if isinstance(exc, asyncio.CancelledError):  # the poster was not cancelled: say so
            exc = CoordinationError("the turn was cut off while starting; resend the message")
        self.result.set_exception(exc)


@dataclass
class TurnHandle:
    """A running turn, as the actor sees it: stop() sets the reason, raises the turn's abort
    signal (tools watch it) and cancels the task. `fence` is what the turn awaits before it
    acts (the actor's, on the thread's lease: engine.liveness)."""

    turn_id: UUID
    task: asyncio.Task[Any]
    reason: str | None = None
    started: bool = False
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    fence: Fence = unfenced

    def stop(self, reason: str) -> None:
        """Ask the turn to stop. Before its first statement committed, the stop is kept and
        applied right after it (cancelling mid-statement would leave its outcome unknown)."""
        if self.reason is None:
            self.reason = reason
            self.abort.set()
            if self.started:
                self.task.cancel()

    def lose(self) -> None:
        """The turn found itself taken (its fence): it ends by raising TurnLost on its own
        task, so nothing cancels it meanwhile; its tools still see the abort."""
        if self.reason is None:
            self.reason = "lost"
            self.abort.set()


class TurnRunner:
    def __init__(
        self,
        *,
        db: Database,
        publisher: Publisher,
        providers: ProviderRegistry,
        toolsets: Sequence[Toolset],
        prices: PriceTable,
        master_key: MasterKey,
        owner: str,
        engine_version: str,
        budget_fail_closed: bool,
        cap_ceilings: CapCeilings | None = None,
        hooks: Sequence[LoopHook] = (),
        services: Mapping[type, object] | None = None,
        metrics: Metrics | None = None,
        context: ContextPolicy | None = None,
        ends: Sequence[TurnEnd] = (),
        fields: Sequence[TurnField] = (),
        cap_groups: Sequence[CapGroup] = (),
        foreground: Foreground | None = None,
    ) -> None:
        self.metrics = metrics or Metrics()
        self.foreground = foreground or Foreground(0)
        self.context = context or ContextPolicy()
        self.db = db
        self.publisher = publisher
        self.providers = providers
        self.toolsets = list(toolsets)
        self.hooks = list(hooks)
        self.services = dict(services or {})
        self.prices = prices
        self.master_key = master_key
        self.owner = owner
        self.engine_version = engine_version
        self.budget_fail_closed = budget_fail_closed
        self.cap_ceilings = cap_ceilings
        self.ends = list(ends)
        # Extensions' per-turn state: read in the start statement, built per turn.
        self.fields = tuple(fields)
        self._columns = tuple((f.name, f.sql) for f in self.fields if f.over == "thread")
        self._item_columns = tuple((f.name, f.sql) for f in self.fields if f.over == "items")
        # Posts to idle threads that start at once share a statement (engine.starts).
        self._starts = StartBatcher(db, owner=owner, columns=self._columns,
                                    item_columns=self._item_columns)
        self.cap_groups = tuple(cap_groups)

    async def run(
        self, scope: Scope, thread_id: UUID, on_start: Callable[[TurnHandle], None],
        posting: Posting | None = None,
    ) -> bool:
        """Run one turn if anything is pending (or `posting` is inserted); False when
        nothing was. A posting's `result` is resolved as soon as the start statement
        committed (or failed), before the turn runs."""
        turn_id = uuid.uuid4()
        token_org = org_id_var.set(str(scope.org_id))
        token_turn = turn_id_var.set(str(turn_id))
        token_thread = thread_id_var.set(str(thread_id))
        spans = contextlib.ExitStack()
        began = time.time_ns()
        try:
            task = asyncio.current_task()
            assert task is not None
            handle = TurnHandle(turn_id, task)
            on_start(handle)  # from here a stop is kept, and applied once the turn exists
            if posting is None:
                start, started = await turn_store.start_turn(
                    self.db, scope, thread_id, turn_id, owner=self.owner,
                    columns=self._columns, item_columns=self._item_columns)
            else:
                try:
                    start, started, posted = await self._starts.post(turn_store.Starting(
                        scope, thread_id, turn_id, posting.post))
                except BaseException as exc:
                    posting.fail(exc)
                    raise
                posting.taken(posted)
            if not started:
                return False
            extras = self._extras(start)
            # The turn continues the trace an extension names (the request that posted its
            # first item, on whichever replica); it started when the drain did.
            span = spans.enter_context(tracing.span("ator.turn", {
                "ator.org_id": str(scope.org_id), "ator.thread_id": str(thread_id),
                "ator.turn_id": str(turn_id), "ator.setup_id": str(start.setup_id),
                "gen_ai.provider.name": start.provider, "gen_ai.request.model": start.model,
            }, parent=_span_parent(extras), start_time=began))
            frozen: FrozenConfig | AtorError
            try:
                frozen = freeze(start, engine_version=self.engine_version,
                                ceilings=self.cap_ceilings, groups=self.cap_groups,
                                bounds=[b for x in implementing(extras.values(), ToolBounds)
                                        for b in x.tool_bounds()])
                extras.update(frozen.extra_caps)
                snapshot = turn_store.Snapshot(frozen.snapshot, frozen.hash)
            except AtorError as exc:  # the turn still runs, to record why it cannot
                frozen = exc
                snapshot = turn_store.Snapshot({"error": exc.message}, "invalid")
            history = start.history + [
                {"seq": e.seq, "kind": e.kind, "data": e.data}
                for e in started if e.kind in HISTORY_KINDS
            ]
            state = TurnState(messages=build_messages(history), abort=handle.abort)
            turn = self._context(start, turn_id, frozen, extras)
            writer = StepWriter(db=self.db, publisher=self.publisher, metrics=self.metrics,
                                turn=turn, state=state, snapshot=snapshot, ends=self.ends)
            handle.started = True
            # From here on the turn's row exists: whatever happens, it ends with a typed
            # status, written below (the `turn_started` announcement too can fail, when the
            # coordinator is away).
            if handle.reason is not None:  # stopped while the turn was being created
                stop, error = _stopped(handle.reason)
            else:
                stop, error = await self._drive(start, turn, frozen, state, writer, handle,
                                                started)
            if not writer.finished:
                interrupted = writer.interrupted_call(_partial_priced(self.prices, turn, state))
                await asyncio.shield(writer.finish(stop, error, interrupted))
            span.set_attributes({"ator.turn.stop_reason": stop, "ator.turn.steps": state.steps,
                                 "gen_ai.usage.input_tokens": state.usage.input_tokens,
                                 "gen_ai.usage.output_tokens": state.usage.output_tokens,
                                 "ator.cost_usd": float(state.cost)})
            if error is not None:
                span.record_error(error[:200])
            return True
        finally:
            spans.close()
            turn_id_var.reset(token_turn)
            thread_id_var.reset(token_thread)
            org_id_var.reset(token_org)

    def _extras(self, start: turn_store.TurnStart) -> dict[type[Any], Any]:
        """The extensions' per-turn state, by type, built from their start columns."""
        extras: dict[type[Any], Any] = {}
        for f in self.fields:
            built = f.build(start.extra.get(f.name))
            if built is not None:
                extras[type(built)] = built
        return extras

    def _context(
        self, start: turn_store.TurnStart, turn_id: UUID, frozen: FrozenConfig | AtorError,
        extras: dict[type[Any], Any],
    ) -> TurnContext:
        caps = frozen.caps if isinstance(frozen, FrozenConfig) else Caps()
        return TurnContext(
            org_id=start.org_id, thread_id=start.thread_id, turn_id=turn_id,
            setup_id=start.setup_id, root_id=start.root_id, depth=start.depth,
            provider=start.provider, model=start.model, persona=start.persona,
            instructions=start.instructions, caps=caps,
            cache=frozen.cache if isinstance(frozen, FrozenConfig) else True,
            config_hash=frozen.hash if isinstance(frozen, FrozenConfig) else "invalid",
            persona_version=start.setup_version,
            instructions_version=start.instructions_version, policy=start.policy,
            policy_version=start.policy_version, policy_replace=start.policy_replace,
            extras=extras,
        )

    async def _drive(
        self,
        start: turn_store.TurnStart,
        turn: TurnContext,
        frozen: FrozenConfig | AtorError,
        state: TurnState,
        writer: StepWriter,
        handle: TurnHandle,
        started: Sequence[Event],
    ) -> tuple[str, str | None]:
        limit = frozen.caps.turn_timeout if isinstance(frozen, FrozenConfig) else 0.0
        try:
            await self.publisher.events(Scope(turn.org_id), turn.thread_id, started)
            if isinstance(frozen, AtorError):
                return f"error:{frozen.kind}", frozen.message
            # The requests being answered go first (a burst's POSTs): bounded, and before
            # the turn's own clock starts. A stop meanwhile lands below like any other.
            await self.foreground.after_requests()
            async with asyncio.timeout(limit):
                outcome = await self._loop(start, turn, frozen, state, writer, handle.fence)
            return outcome.stop_reason, outcome.error
        except TimeoutError:
            return "timeout", f"turn exceeded {limit:g}s"
        except asyncio.CancelledError:
            if handle.reason is None:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            return _stopped(handle.reason)
        except TurnLost as exc:
            return "error:lost", exc.message
        except AtorError as exc:
            return f"error:{exc.kind}", exc.message
        except Exception as exc:
            # A bug or an unmapped failure: end the turn now, with a message, not a silent
            # `error:lost` one lease later.
            log.exception("turn failed unexpectedly")
            return "error:internal", f"internal error: {type(exc).__name__}: {exc}"[:500]

    async def _loop(
        self,
        start: turn_store.TurnStart,
        turn: TurnContext,
        frozen: FrozenConfig,
        state: TurnState,
        writer: StepWriter,
        fence: Fence,
    ) -> Outcome:
        scope = Scope(turn.org_id)

        async def resolve(name: str) -> str:
            return await secret_store.reveal(self.db, self.master_key, scope, name)

        factory = self.providers.factory(start.provider)
        # A runtime that runs its own tools (an agent CLI) is offered none of ator's.
        tools = TurnTools([] if factory.own_tools else self.toolsets,
                          allow=frozen.allow, deny=frozen.deny,
                          description_limit=frozen.caps.tool_description_chars,
                          within=frozen.within)
        gate = BudgetGate(db=self.db, prices=self.prices, limit=start.monthly_budget_usd,
                          fail_closed=self.budget_fail_closed)
        # A lease keeps the provider's client open for the whole turn even if the cache
        # evicts it meanwhile.
        async with self.providers.lease(start.provider, start.config, resolve) as provider:
            if factory.sessions:  # what it returned last time
                state.session = await provider_state.load(self.db, scope, turn.thread_id,
                                                          start.provider)
            limits = self.context.limits(start.provider, start.model, start.config)
            # Context first: the gate then reserves for the request actually sent. A
            # runtime taking one prompt gets it packed by priority; any other is compacted
            # (the summary call passes the gate and every other hook like any call, a
            # subagent's own and tree budgets included).
            context: LoopHook
            if factory.one_prompt or start.config.get("single_prompt") is True:
                context = SinglePromptHook(limits.window_tokens)
            else:
                context = CompactionHook(provider=provider, sink=writer, prices=self.prices,
                                         limits=limits, gates=[gate, *self.hooks],
                                         stash=self._stash(turn))
            return await run_loop(turn, state, provider=provider, tools=tools, sink=writer,
                                  prices=self.prices, hooks=[context, gate, *self.hooks],
                                  services=self.services, fence=fence)

    def _stash(self, turn: TurnContext) -> Stash | None:
        """Where an item too long to send is stored whole (read back with read_tool_result)."""
        results = self.services.get(StoredResults)
        if not isinstance(results, StoredResults):
            return None
        ctx = ToolContext(turn.org_id, turn.thread_id, turn.turn_id, "compaction")

        async def stash(text: str) -> str:
            return await results.stash(ctx, text)

        return stash


def _span_parent(extras: dict[type[Any], Any]) -> str | None:
    for x in implementing(extras.values(), SpanParent):
        return str(x.span_parent())
    return None


def _stopped(reason: str) -> tuple[str, str | None]:
    if reason == "lost":
        return "error:lost", "this replica lost the turn's lease"
    return f"cancelled:{reason}", None


def _partial_priced(prices: PriceTable, turn: TurnContext, state: TurnState) -> Priced:
    """What the call in flight when the turn was cut short cost: what the provider reported
    it cost so far if it did (a CLI runtime), else its usage at the catalog price of the
    call's model (the turn's, or the one the provider named when the turn's has no price)."""
    partial = state.partial
    if partial is None:
        return prices.cost(turn.model, Usage())
    if partial.meter.cost_usd is not None:
        return Priced.reported(partial.meter.cost_usd)
    model = partial.model or turn.model
    if prices.lookup(model) is None and partial.meter.model:
        model = partial.meter.model
    return prices.cost(model, partial.usage())
