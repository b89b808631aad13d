"""Decisions on pending actions: a person approves or denies, once (layer: engine; imports
agent.extension, engine.tool_calls, jobs, store.approvals, tools, errors).

A pending action (store/approvals.py) is something held for a person: a tool call a turn's
model made (`kind='tool'`, held by `ApprovalGate` in engine/approvals_extension.py) or
one made outside a turn (`hold`, for the MCP gateway). `Approvals.decide` is the one
decide-once path:

1. read the org's action (another org's: 404 `not_found`); not pending: 409
   `approval_decided`; the kind checks edited arguments (a tool's: its JSON schema, 422
   `invalid_arguments`);
2. one conditional `UPDATE … WHERE status = 'pending'` claims it: exactly one decider wins
   on any replica, the other gets 409 `approval_decided`. A denial writes its `is_error`
   result into the thread's mailbox in that statement; an approval then runs the action
   (the tool, once, through `ToolCalls`: the same policy, validation, caps, egress guard and
   audit as any call outside a turn) and delivers its result to the mailbox;
3. the thread is woken (`Waker.notify`): its actor, on whichever replica, continues the
   same conversation in a new turn that starts with the result (agent/history.py answers
   the held tool_use with it); watchers on this replica are told (the socket gateway pushes
   `approval.decided` to the org room).

Expiry is a denial by timeout: the action's job (jobs kernel, `approvals.expire`, due at
`expires_at`) runs the same conditional update. The same job answers an approval whose
replica stopped between the claim and the delivery (an error result, after `run_grace`):
at most once executed, never a held call left without a result. The row is the audit: who, when, the
arguments before and after, the reason and the result.

**The seam for other kinds** (a workflow `human` gate): register a `DecisionKind` with
`Approvals.register(kind)`; create its actions with `store.approvals.create(kind=…)`; its
`check` validates a decision's input, `approved`/`refused` say what follows (content for the
thread's mailbox, or None when the kind delivers itself, e.g. by waking a workflow run).
The claim, the 404/409 rules, expiry and the audit are shared.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol
from uuid import UUID

from ator.agent.extension import Waker
from ator.engine.recent import Recent
from ator.engine.tool_calls import ToolCalls
from ator.errors import ConfigError, Conflict, NotFound, ValidationFailed
from ator.jobs import JobContext, JobKind, Retry
from ator.obs.logging import get_logger
from ator.store import approvals as store
from ator.store import threads as thread_store
from ator.store.database import Database
from ator.store.scope import Scope
from ator.tools.base import Caller, ToolCall
from ator.tools.policy import ToolPolicy
from ator.tools.registry import ToolRegistry
from ator.tools.toolset import ToolScope

__all__ = ["EXPIRE", "Approvals", "Decision", "DecisionKind", "ToolDecisions", "action_view",
           "tool_results"]

EXPIRE = "approvals.expire"
Watcher = Callable[[Scope, store.Action], None]
log = get_logger("ator.engine.approvals")


def tool_results(action: store.Action, content: str, *, is_error: bool,
                 duration_ms: int = 0, truncated_from: int | None = None) -> dict[str, Any]:
    """The mailbox item that answers a held call: a `tool_results` record for its
    tool_use id, and which decision it came from."""
    return {"results": [{
        "type": "tool_result", "tool_use_id": action.tool_use_id, "name": action.name,
        "content": content, "is_error": is_error, "duration_ms": duration_ms,
        "truncated_from": truncated_from}],
        "approval": {"id": str(action.id), "status": action.status}}


def action_view(a: store.Action) -> dict[str, Any]:
    """A pending action as the API, the socket and the console show it."""
    def at(value: Any) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "id": str(a.id), "kind": a.kind, "status": a.status,
        "thread_id": str(a.thread_id) if a.thread_id else None,
        "turn_id": str(a.turn_id) if a.turn_id else None, "tool_use_id": a.tool_use_id,
        "name": a.name, "arguments": a.arguments, "subject": a.subject,
        "decided_arguments": a.decided_arguments, "reason": a.reason,
        "decided_by": str(a.decided_by) if a.decided_by else None,
        "decided_at": at(a.decided_at), "expires_at": at(a.expires_at),
        "result": a.result, "executed_at": at(a.executed_at), "created_at": at(a.created_at),
    }


class DecisionKind(Protocol):
    """What one kind of pending action does with a decision."""

    name: str

    async def may_decide(self, scope: Scope, action: store.Action, by: UUID) -> None:
        """Refuse a decider the action does not accept (Forbidden), before the claim."""
        ...

    async def check(self, scope: Scope, action: store.Action,
                    arguments: dict[str, Any] | None) -> None:
        """Refuse a decision's edited input (ValidationFailed) before anything is claimed."""
        ...

    async def approved(self, scope: Scope, action: store.Action,
                       arguments: dict[str, Any]) -> dict[str, Any] | None:
        """Run an approved (claimed) action once; content for its thread's mailbox."""
        ...

    def refused(self, action: store.Action, status: str,
                reason: str | None) -> dict[str, Any] | None:
        """Content for the thread's mailbox on a denial (`denied`) or a timeout (`expired`)."""
        ...

    async def settled(self, scope: Scope, action: store.Action) -> None:
        """After any decision was committed (and again by the expiry job when the action
        is no longer pending): what the kind does itself, idempotently (a gate wakes its
        run)."""
        ...


class ToolDecisions:
    """Held tool calls: an approval runs the tool through `ToolCalls` as the person who
    approved it, in the place of the turn that held it (`run_held`: its thread's tools and
    MCP sessions); a call held outside a turn runs as any call outside one."""

    name = "tool"

    def __init__(self, db: Database, calls: Callable[[], ToolCalls]) -> None:
        self._db = db
        self._calls = calls

    async def may_decide(self, scope: Scope, action: store.Action, by: UUID) -> None:
        return  # any member of the org (the route's role check)

    async def settled(self, scope: Scope, action: store.Action) -> None:
        return  # the thread is woken by `Approvals` itself

    async def check(self, scope: Scope, action: store.Action,
                    arguments: dict[str, Any] | None) -> None:
        if arguments is None:
            return
        place = await self._place(scope, action)
        if place is not None:
            tool = await self._calls().turn_tool(place, action.name)
        else:
            listing = await self._calls().tools(scope, Caller("user", action.org_id),
                                                policy=_only(action.name))
            tool = next((t for t in listing.tools if t.name == action.name), None)
        if tool is None:
            return  # gone meanwhile: the run answers with `unknown_tool`
        problem = ToolRegistry([tool]).validate(ToolCall("edit", action.name, arguments))
        if problem is not None:
            raise ValidationFailed(problem, code="invalid_arguments",
                                   errors=[{"loc": ["arguments"], "msg": problem,
                                            "type": "invalid_arguments"}])

    async def approved(self, scope: Scope, action: store.Action,
                       arguments: dict[str, Any]) -> dict[str, Any] | None:
        caller = Caller("user", action.decided_by or action.org_id)
        place = await self._place(scope, action)
        if place is not None and action.tool_use_id is not None:
            done = await self._calls().run_held(scope, caller, action.name, arguments,
                                                place=place, tool_use_id=action.tool_use_id)
        else:
            done = await self._calls().run(scope, caller, action.name, arguments,
                                           policy=_only(action.name))
        return tool_results(action, done.content, is_error=done.is_error,
                            duration_ms=done.duration_ms, truncated_from=done.truncated_from)

    async def _place(self, scope: Scope, action: store.Action) -> ToolScope | None:
        """Where a call held in a turn runs: that turn's place (its thread's tools, named
        as the model saw them). None for a call held outside a turn."""
        if action.thread_id is None or action.turn_id is None:
            return None
        try:
            thread = await thread_store.get_thread(self._db, scope, action.thread_id)
        except NotFound:
            return None
        return ToolScope(scope.org_id, thread.id, action.turn_id, thread.setup_id,
                         thread.root_id, 1)

    def refused(self, action: store.Action, status: str,
                reason: str | None) -> dict[str, Any] | None:
        if status == "expired":
            text = (f"Tool {action.name!r} did not run: nobody approved it in time "
                    "(denied by timeout).")
        else:
            text = f"Tool {action.name!r} did not run: a person denied it."
            if reason:
                text += f" Their reason: {reason}"
        return tool_results(action, text, is_error=True)


def _only(name: str) -> ToolPolicy:
    """The policy under which an approved call runs: that tool alone (an opt-in tool
    included: the person approved that very call)."""
    return ToolPolicy(allow=[name])


@dataclass(frozen=True, slots=True)
class Decision:
    approve: bool
    arguments: dict[str, Any] | None = None
    reason: str | None = None


class Approvals:
    """Pending actions and their decisions (one per engine)."""

    def __init__(self, db: Database, waker: Waker, *, timeout: float,
                 job_attempts: int = 5, run_grace: float = 600.0,
                 settings_ttl: float = 5.0) -> None:
        self.db = db
        # `gates_mcp_writes` per org, read once per `settings_ttl` seconds (see there).
        self._gates = Recent(settings_ttl)
        # How long after an approval its run may still be going (a tool's own timeout is
        # shorter): past it, an undelivered result is answered as lost (`_unfinished`).
        self.run_grace = run_grace
        self.waker = waker
        self.timeout = timeout
        self.job_attempts = job_attempts
        self._kinds: dict[str, DecisionKind] = {}
        self._watchers: list[Watcher] = []

    def register(self, kind: DecisionKind) -> None:
        if kind.name in self._kinds:
            raise ConfigError(f"decision kind {kind.name!r} is registered twice")
        self._kinds[kind.name] = kind

    def watch(self, fn: Watcher) -> Callable[[], None]:
        """Call `fn(scope, action)` after each decision committed on this replica."""
        self._watchers.append(fn)
        return lambda: self._watchers.remove(fn)

    def job_kinds(self) -> list[JobKind]:
        return [JobKind(EXPIRE, self._expire, max_attempts=self.job_attempts, timeout=60.0)]

    # Reading ------------------------------------------------------------------------------

    async def get(self, scope: Scope, action_id: UUID) -> store.Action:
        found = await store.get(self.db, scope, action_id)
        if found is None:
            raise NotFound("approval not found")
        return found

    async def pending(self, scope: Scope, *, limit: int = 50, cursor: str | None = None,
                      kind: str | None = None) -> store.PendingPage:
        return await store.list_pending(self.db, scope, limit=limit, cursor=cursor, kind=kind)

    async def settings(self, scope: Scope) -> dict[str, Any]:
        """The org's approval settings."""
        return {"approve_mcp_writes": await store.mcp_writes(self.db, scope)}

    async def gates_mcp_writes(self, scope: Scope) -> bool:
        """Whether the org holds its MCP tools not marked read-only for approval, as a call
        outside a turn (the MCP gateway) reads it on every call: kept per org for
        `settings_ttl` seconds (the MCP catalog's rule, `ATOR_MCP_CATALOG_TTL`), so a call
        is not one more database round trip (it was a third of the samples of a gateway
        `tools/call` in py-spy). A change made through this replica counts at once; one made
        through another replica within `settings_ttl` seconds. A turn reads the setting
        fresh in its own start statement."""
        found: bool | None = self._gates.get(scope.org_id)
        if found is None:
            found = await store.mcp_writes(self.db, scope)
            self._gates.put(scope.org_id, found)
        return found

    async def set_settings(self, scope: Scope, *, approve_mcp_writes: bool) -> dict[str, Any]:
        """Require (or not) approval of every MCP tool not marked read-only in the org."""
        self._gates.drop(scope.org_id)
        try:
            if not await store.set_mcp_writes(self.db, scope, approve_mcp_writes):
                raise NotFound("org not found")
        finally:
            self._gates.drop(scope.org_id)  # a read meanwhile may have kept the old value
        return {"approve_mcp_writes": approve_mcp_writes}

    # Holding outside a turn -------------------------------------------------------------

    async def hold(self, scope: Scope, name: str, arguments: dict[str, Any], *,
                   subject: Mapping[str, Any] | None = None, kind: str = "tool",
                   timeout: float | None = None) -> store.Action:
        """A pending action made outside a turn (the MCP gateway's gated call: answer
        "awaits approval" with its id). Approving it runs the tool and records the result
        on the action (`get(...).result`); there is no thread to continue."""
        return await store.create(
            self.db, scope, kind=kind, name=name, arguments=dict(arguments),
            subject=dict(subject or {}), expire_after=timeout or self.timeout,
            job_kind=EXPIRE, attempts=self.job_attempts)

    # Deciding -----------------------------------------------------------------------------

    async def decide(self, scope: Scope, action_id: UUID, by: UUID,
                     decision: Decision) -> store.Action:
        """Approve (optionally with edited arguments) or deny (with a reason) a pending
        action, once. Raises NotFound (not this org's), Conflict `approval_decided` (decided
        already, or by someone else at the same moment), ValidationFailed (edited arguments
        refused by the kind)."""
        action = await self.get(scope, action_id)
        kind = self._kind(action.kind)
        if action.status != "pending":
            raise _decided(action)
        await kind.may_decide(scope, action, by)
        if decision.approve:
            await kind.check(scope, action, decision.arguments)
        edited = decision.arguments if decision.approve else None
        status = "approved" if decision.approve else "denied"
        content = None if decision.approve else kind.refused(action, status, decision.reason)
        claimed = await store.decide(self.db, scope, action_id, status=status, by=by,
                                     reason=decision.reason, decided_arguments=edited,
                                     content=content)
        if claimed is None:
            raise _decided(await self.get(scope, action_id))
        if decision.approve:
            args = claimed.arguments if edited is None else edited
            delivery = await kind.approved(scope, claimed, args)
            if delivery is not None:
                claimed = await store.deliver(self.db, scope, claimed.id, delivery) or claimed
        await self._after(scope, claimed)
        return claimed

    async def _expire(self, ctx: JobContext, payload: dict[str, Any]) -> None:
        """The job due at an action's `expires_at`: deny it by timeout if still pending."""
        action_id = UUID(str(payload["action_id"]))
        action = await store.get(self.db, ctx.scope, action_id)
        if action is not None and action.status == "approved" and action.result is None:
            await self._unfinished(ctx.scope, action)
            return
        if action is None:
            return
        if action.status != "pending":
            # A replica that stopped after the claim may not have told the kind.
            await self._kind(action.kind).settled(ctx.scope, action)
            return
        content = self._kind(action.kind).refused(action, "expired", "timeout")
        expired = await store.decide(self.db, ctx.scope, action_id, status="expired",
                                     by=None, reason="timeout", decided_arguments=None,
                                     content=content, expiring=True)
        if expired is None:
            fresh = await store.get(self.db, ctx.scope, action_id)
            if fresh is not None and fresh.status == "pending":
                raise Retry(1.0, "not expired yet by the database's clock")
            return
        await self._after(ctx.scope, expired)

    async def _unfinished(self, scope: Scope, action: store.Action) -> None:
        """An approval whose result never came (the replica running it stopped between the
        claim and the delivery): once `run_grace` has passed since the decision, the held
        call is answered with an error, so the conversation is never left without one.
        The tool may or may not have run; it is never run again."""
        assert action.decided_at is not None
        waited = (datetime.now(UTC) - action.decided_at).total_seconds()
        if waited < self.run_grace:
            raise Retry(self.run_grace - waited, "the approved call may still be running")
        content = tool_results(action, f"Tool {action.name!r} was approved, but the server "
                               "running it stopped before it reported a result; it may or may "
                               "not have run. Check before trying again.", is_error=True)
        delivered = await store.deliver(self.db, scope, action.id, content)
        if delivered is not None:
            await self._after(scope, delivered)

    async def _after(self, scope: Scope, action: store.Action) -> None:
        await self._kind(action.kind).settled(scope, action)
        if action.thread_id is not None:
            await self.waker.notify(scope, action.thread_id)
        for fn in list(self._watchers):
            try:
                fn(scope, action)
            except Exception:  # a watcher's failure is logged, never the decision's
                log.warning("an approvals watcher failed", exc_info=True)

    def _kind(self, name: str) -> DecisionKind:
        found = self._kinds.get(name)
        if found is None:
            raise ConfigError(f"no decision kind {name!r} in this engine")
        return found


def _decided(action: store.Action) -> Conflict:
    return Conflict(f"this approval was already decided ({action.status})",
                    code="approval_decided")
