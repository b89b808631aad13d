"""The subagent service: delegation trees plugged into the engine through its seams (layer:
subagents; imports agent, providers.base, store, errors).

    agent_spawn ─► Subagents.spawn: caps, then child thread + first mailbox item in one
                   transaction (idempotent per tool-use id) ─► wake the child
    child's final write ─► Results (a TurnEnd): push one result into the parent's mailbox
                   in the same statement; the item's unique client id `subagent:<child>`
                   is the claim (exactly once, whoever races) ─► wake the parent
    parent busy ─► result_injector (agent/notices.py, between_steps): pending results are
                   persisted as events of the running turn (taking them from the mailbox
                   in that write), then shown; an idle parent gets them as its next turn
    child's calls ─► ChildBudget (before_call): its own budget and the tree's
    stop ─► Subagents.cascade: mark the subtree cancelled (results dropped), abort its turns
                   on whichever replica runs them
    a claim committed but its wake lost (the process died) ─► the reaper's sweep of pending
                   mailbox items wakes the parent
    reaper ─► a child lost with its replica: the statement that closes its turn's log
                   tells the parent (`errored`, reason `lost`) with the same claim

It is an extension (`subagents/extension.py`): the composition root builds it from the
kernel, whose `Waker` (wake a thread, stop a thread's turn anywhere) means this package
never reaches into the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from ator.agent.caps import CapCeilings, CapGroup
from ator.agent.extension import Waker
from ator.agent.hooks import LoopHook, StopTurn
from ator.agent.notices import NoticeInjector
from ator.agent.state import TurnContext, TurnState
from ator.cost.estimate import over_cap, worst_case_usd
from ator.cost.prices import PriceTable
from ator.errors import ConfigError, NotFound, ToolError, ValidationFailed
from ator.providers.base import ModelRequest
from ator.providers.size import request_tokens
from ator.store import setups as setup_store
from ator.store import tree as tree_store
from ator.store import turns as turn_store
from ator.store.database import Database
from ator.store.records import TreeNode
from ator.store.scope import Scope
from ator.store.tree import PAGE_CHARS, render, status_of_turn
from ator.subagents.caps import TREE_CAPS, SubagentTurn, bound, subagent_caps, tool_bounds

__all__ = ["ChildBudget", "Results", "Subagents", "Waker", "result_injector", "tool_bounds"]

_CAP_HELP = {
    "depth": ("a subagent spawned here would be {current} levels deep, beyond the cap of "
              "{limit}: do this work yourself, or give it to a sibling higher up"),
    "width": ("this thread already spawned {current} subagents (cap {limit}): consolidate "
              "tasks into fewer subagents, or do the rest yourself"),
    "live": ("{current} subagents of this tree are still running (cap {limit}): wait for "
             "their results (they arrive by themselves) before spawning more"),
    "tree_tokens": ("the tree's subagents have used {current} tokens of their {limit} "
                    "budget: finish with what you have"),
    "tree_usd": ("the tree's subagents have spent ${current} of their ${limit} budget: "
                 "finish with what you have"),
}


@dataclass(frozen=True, slots=True)
class Spawn:
    """A validated `agent_spawn` call."""

    title: str
    task: str
    deliverable: str
    boundaries: str
    setup_id: UUID | None
    tools: list[str] | None
    budget: dict[str, Any]
    write_scope: list[str] | None

    def contract(self) -> dict[str, Any]:
        return {"task": self.task, "deliverable": self.deliverable,
                "boundaries": self.boundaries, "tools": self.tools, "budget": self.budget,
                "write_scope": self.write_scope}

    def message(self) -> str:
        parts = ["You are a subagent: another agent delegated this task to you. Your final "
                 "answer is sent back to it as your result.", f"## Task\n{self.task}"]
        if self.deliverable:
            parts.append(f"## Deliverable (the shape of your final answer)\n{self.deliverable}")
        if self.boundaries:
            parts.append(f"## Out of bounds\n{self.boundaries}")
        if self.write_scope:
            parts.append("## Write scope\nYou may change only: " + ", ".join(self.write_scope))
        else:
            parts.append("## Workspace\nOther agents share your workspace: change nothing "
                         "the task does not ask you to.")
        if self.budget:
            limits = ", ".join(f"{k}={v}" for k, v in self.budget.items())
            parts.append(f"## Budget\n{limits}. Stop and report what you have before it "
                         "runs out.")
        return "\n\n".join(parts)


def _budget(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    out: dict[str, Any] = {}
    for key in ("max_steps", "max_tokens"):
        if raw.get(key) is not None:
            out[key] = int(raw[key])
    if raw.get("max_usd") is not None:
        try:
            usd = Decimal(str(raw["max_usd"]))
        except InvalidOperation:
            raise ToolError("budget.max_usd must be a number") from None
        if not usd.is_finite() or usd <= 0:
            raise ToolError("budget.max_usd must be a positive number")
        out["max_usd"] = str(usd)
    return out


def parse_spawn(args: dict[str, Any]) -> Spawn:
    """Arguments already match the tool's JSON schema; what a schema cannot say is checked
    here (ToolError: the model reads it as an `is_error` result)."""
    title, task = str(args["title"]).strip(), str(args["task"]).strip()
    if not title or not task:
        raise ToolError("title and task must not be empty")
    setup_id = None
    if args.get("setup_id"):
        try:
            setup_id = UUID(str(args["setup_id"]))
        except ValueError:
            raise ToolError("setup_id is not a setup id; call setup_list") from None
    return Spawn(title=title, task=task, deliverable=str(args.get("deliverable") or ""),
                 boundaries=str(args.get("boundaries") or ""), setup_id=setup_id,
                 tools=list(args["tools"]) if args.get("tools") is not None else None,
                 budget=_budget(args.get("budget")),
                 write_scope=list(args["write_scope"]) if args.get("write_scope") else None)


def _tree_caps(info: tree_store.ParentInfo, group: CapGroup) -> tree_store.TreeCaps:
    """The caps a spawn from this thread runs under: its setup's (clamped to the operator's
    ceilings), lowered by the org's and by what the tree above it was given."""
    try:
        caps = group.parse(info.setup_caps, clamp=True)
    except ConfigError:
        caps = group.parse({})
    values: dict[str, Any] = {"depth": caps.subagent_depth, "width": caps.subagent_width,
                              "live": caps.subagent_live, "tokens": caps.tree_tokens,
                              "usd": Decimal(str(caps.tree_usd))}
    names = {"depth": "subagent_depth", "width": "subagent_width", "live": "subagent_live",
             "tokens": "tree_tokens", "usd": "tree_usd"}
    inherited = (info.contract or {}).get("tree_caps") or {}
    for key, name in names.items():
        for source in (info.org_caps.get(name), inherited.get(key)):
            if isinstance(source, int | float | str) and not isinstance(source, bool):
                lower = Decimal(str(source)) if key == "usd" else int(source)
                values[key] = min(values[key], lower)
    return tree_store.TreeCaps(**values)


class Subagents:
    """The service tools reach through `ToolContext.service(Subagents)`."""

    def __init__(self, db: Database, waker: Waker, *,
                 ceilings: CapCeilings | None = None) -> None:
        self.db = db
        self.waker = waker
        self.caps = subagent_caps(ceilings or CapCeilings())
        self.spawned_in: set[UUID] = set()  # turns of this process that spawned a child

    # Tools ----------------------------------------------------------------------------

    async def spawn(self, scope: Scope, thread_id: UUID, turn_id: UUID, tool_use_id: str,
                    spawn: Spawn) -> dict[str, Any]:
        info = await tree_store.parent_info(self.db, scope, thread_id)
        caps = _tree_caps(info, self.caps)
        contract = spawn.contract()
        contract["title"] = spawn.title
        above = (info.contract or {}).get("tools")
        if above is not None:  # a subagent cannot hand out tools it was not given
            contract["tools"] = [t for t in (spawn.tools if spawn.tools is not None else above)
                                 if t in above]
        # Whatever setup the child runs on, its tools stay within its parent's: the parent's
        # setup policy and every bound above it travel down as bounds the child must also
        # satisfy (so naming a more permissive setup widens nothing).
        contract["bounds"] = [*tool_bounds(info.contract),
                              bound(info.setup_policy or {})]
        contract["tree_caps"] = {"depth": caps.depth, "width": caps.width, "live": caps.live,
                                 "tokens": caps.tokens, "usd": str(caps.usd)}
        made = await tree_store.spawn(
            self.db, scope, info, tool_use_id=tool_use_id, setup_id=spawn.setup_id,
            title=spawn.title, contract=contract, message=spawn.message(), caps=caps)
        if isinstance(made, tree_store.Refused):
            help_text = _CAP_HELP[made.cap].format(current=made.current, limit=made.limit)
            raise ToolError(f"spawn refused by the {made.cap} cap: {help_text}")
        self.spawned_in.add(turn_id)
        if made.created:
            await self.waker.notify(scope, made.id)
        return {"id": str(made.id), "alias": made.alias, "title": spawn.title,
                "status": "spawned" if made.created else "already spawned by this call",
                "note": "The result arrives by itself as a message; do not poll."}

    async def status(self, scope: Scope, thread_id: UUID, ref: str | None) -> dict[str, Any]:
        nodes = await tree_store.tree(self.db, scope, thread_id)
        if ref:
            found = [n for n in nodes if n.parent_id == thread_id and ref in (str(n.id), n.alias)]
            if not found:
                raise ToolError(f"no subagent {ref!r} of this thread")
            nodes = found
        return {"subagents": [_node_view(n) for n in nodes if n.id != thread_id]}

    async def abort(self, scope: Scope, thread_id: UUID, ref: str, reason: str) -> dict[str, Any]:
        try:
            node = await tree_store.child(self.db, scope, thread_id, ref)
        except NotFound as exc:
            raise ToolError(exc.message) from None
        ids = await tree_store.cancel(self.db, scope, node.id, include_self=True)
        for cancelled in ids:
            await self.waker.stop(cancelled, "parent" if cancelled == node.id else "cascade")
        return {"aborted": node.alias, "subtree": len(ids), "reason": reason,
                "note": "No result will come from it or its subagents."}

    async def result(self, scope: Scope, thread_id: UUID, ref: str, page: int) -> str:
        try:
            node = await tree_store.child(self.db, scope, thread_id, ref)
        except NotFound as exc:
            raise ToolError(exc.message) from None
        text = await tree_store.final_text(self.db, scope, node.id)
        pages = max(1, -(-len(text) // PAGE_CHARS))
        if page < 1 or page > pages:
            raise ToolError(f"page {page} does not exist: the result has {pages} page(s)")
        chunk = text[(page - 1) * PAGE_CHARS:page * PAGE_CHARS]
        more = (f"\n[ator] page {page} of {pages}; next: agent_result(id=\"{node.alias}\", "
                f"page={page + 1})" if page < pages else f"\n[ator] page {page} of {pages} (end)")
        return chunk + more

    async def setups(self, scope: Scope) -> list[dict[str, Any]]:
        return [{"id": str(s.id), "name": s.name, "provider": s.provider, "model": s.model,
                 "persona": s.persona[:300]}
                for s in await setup_store.list_setups(self.db, scope)]

    async def set_org_caps(self, scope: Scope, caps: dict[str, Any]) -> None:
        """Set the org's subagent tree caps (`subagent_depth`, `subagent_width`,
        `subagent_live`, `tree_tokens`, `tree_usd`): each lowers what the org's setups
        allow. Raises ValidationFailed (422 `invalid_cap`) for another cap, ConfigError
        (422) for a bad value or one above the operator's ceiling."""
        unknown = set(caps) - set(TREE_CAPS)
        if unknown:
            raise ValidationFailed(f"not a tree cap: {', '.join(sorted(unknown))}; known: "
                                   f"{', '.join(sorted(TREE_CAPS))}", code="invalid_cap")
        self.caps.parse(caps)
        await tree_store.set_org_caps(self.db, scope, caps)

    # The stop cascade -------------------------------------------------------------------

    async def cascade(self, scope: Scope, thread_id: UUID, reason: str = "user") -> list[UUID]:
        """Cancel everything below `thread_id` and stop its running turns wherever they run.
        A subagent stopped while idle (waiting for its own subagents, now cancelled) would
        never end a turn to tell its parent: it tells it `cancelled` here."""
        ids = await tree_store.cancel(self.db, scope, thread_id, include_self=False)
        for cancelled in ids:
            await self.waker.stop(cancelled, "cascade")
        node = (await tree_store.tree(self.db, scope, thread_id))[0]
        if node.parent_id is not None and not node.told and not node.live:
            content, text = render(
                child_id=node.id, alias=node.alias or "", title=node.title,
                status="cancelled", reason=reason, steps=node.steps, tokens=node.tokens,
                usd=node.usd, text=await tree_store.final_text(self.db, scope, node.id),
                error=None)
            parent = await tree_store.tell_idle(self.db, scope, node.id, content, text)
            if parent is not None:
                await self.waker.notify(scope, parent)
        return ids


def _node_view(n: TreeNode) -> dict[str, Any]:
    return {"id": str(n.id), "alias": n.alias, "title": n.title, "status": n.status,
            "steps": n.steps, "tokens": n.tokens, "usd": str(n.usd), "live": n.live,
            "result_delivered": n.told}


class Results:
    """The child's side (a `TurnEnd` of the step writer): its final write pushes its result
    to the parent, and once committed the parent is woken."""

    def __init__(self, service: Subagents) -> None:
        self.service = service

    def parts(self, turn: TurnContext, state: TurnState,
              finish: turn_store.Finished) -> Sequence[turn_store.StepPart]:
        self.service.spawned_in.discard(turn.turn_id)
        place = turn.get(SubagentTurn)
        if place is None or place.parent_id is None:
            return []
        if finish.status == "waiting":
            return []  # held for a person's decision: told when the continued turn ends
        status, reason = status_of_turn(finish.status, finish.stop_reason)
        text = ""
        for message in reversed(state.messages):
            if message["role"] == "assistant":
                text = "".join(b.get("text", "") for b in message["content"]
                               if b.get("type") == "text")
                if text:
                    break
        contract = place.contract or {}
        content, rendered = render(
            child_id=turn.thread_id, alias=str(contract.get("alias", "")),
            title=str(contract.get("title", "")),
            status=status, reason=reason, steps=state.steps, tokens=state.usage.total_tokens,
            usd=state.cost, text=text, error=finish.error)
        return [tree_store.ResultPart(turn.thread_id, content, rendered)]

    async def committed(self, turn: TurnContext, write: turn_store.StepWrite) -> None:
        parent = write.extra.get("notified_parent")
        if parent is not None:
            await self.service.waker.notify(Scope(turn.org_id), parent)


def result_injector(service: Subagents) -> NoticeInjector:
    """A busy parent gets its children's results between steps, persisted first
    (agent/notices.py). Only a thread with children still running looks (one read per
    step); others cost nothing."""

    def wants(turn: TurnContext) -> bool:
        place = turn.get(SubagentTurn)
        return (place is not None and place.children > 0) or turn.turn_id in service.spawned_in

    return NoticeInjector(service.db, tree_store.RESULT_CMID, wants)


class ChildBudget(LoopHook):
    """Before each model call of a subagent: its own budget (steps, tokens, USD over all its
    turns) and its tree's (all descendants of the root). Root threads cost nothing here.

    The rule is the org ledger's: a call runs only if its worst case fits under what is
    left. Steps and tokens left must be above zero; in USD, settled spend plus the call's
    worst case (`cost.estimate`, the figure the org ledger reserves) must stay within the
    limit. Reservations of calls in flight are not spend: this call's own is what is being
    checked, and other calls' are settled by their own writes, so an org with a monthly
    budget (which reserves) and one without (which does not) get the same answer."""

    def __init__(self, service: Subagents, prices: PriceTable | None = None) -> None:
        self.service = service
        self.prices = prices

    def reads_spend(self, turn: TurnContext) -> bool:
        place = turn.get(SubagentTurn)
        return place is not None and place.parent_id is not None and turn.root_id is not None

    async def before_call(self, turn: TurnContext, state: TurnState,
                          request: ModelRequest) -> ModelRequest:
        place = turn.get(SubagentTurn)
        if place is None or place.parent_id is None or turn.root_id is None:
            return request
        spent = await tree_store.spend(self.service.db, Scope(turn.org_id), turn.thread_id,
                                       turn.root_id)
        own = spent.contract.get("budget") or {}
        tree = spent.contract.get("tree_caps") or {}
        for name, limit, used in (
            ("max_steps", own.get("max_steps"), spent.steps),
            ("max_tokens", own.get("max_tokens"), spent.tokens),
            ("the tree's tokens", tree.get("tokens"), spent.tree_tokens),
        ):
            if limit is not None and Decimal(used) >= Decimal(str(limit)):
                raise StopTurn("budget", f"subagent budget spent: {name} is {used} of "
                                         f"{limit}")
        worst = Decimal(0)
        if self.prices is not None:  # an unpriced model records 0 and is checked at 0
            worst = worst_case_usd(self.prices, request.model, request_tokens(request),
                                   request.max_tokens) or Decimal(0)
        for label, usd_limit, usd in (("max_usd", own.get("max_usd"), spent.usd),
                                      ("the tree's USD", tree.get("usd"), spent.tree_usd)):
            if usd_limit is None:
                continue
            why = over_cap("subagent budget", label, usd, worst, Decimal(str(usd_limit)))
            if why is not None:
                raise StopTurn("budget", why)
        return request
