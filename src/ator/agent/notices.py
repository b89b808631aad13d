"""Notices: how a result from outside a turn reaches a conversation exactly once (layer:
agent; imports agent.extension, agent.hooks, agent.state, store.mailbox, store.scope).

A feature whose work ends outside the thread (a subagent, a workflow run) tells the thread
by a `notification` item in its mailbox whose client id is a claim, `<prefix><id>`: the
mailbox holds one per (thread, claim), so the insert *is* the claim and the thread is told
once whoever races (store/mailbox.py). Then:

- an idle thread is woken and its next turn takes the item (persisted as an event first,
  shown as data: agent/history.py wraps every notification as untrusted);
- a busy thread gets it between steps through a `NoticeInjector` of that prefix, which
  persists it as an event of the running turn (taking the item from the mailbox in that
  write) before the model sees it.

`deliver` is the insert-then-wake for a feature that is not in a turn's final write (the
subagents' claim rides the child's last statement instead, store/tree.py); both share the
claim rule and the injector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from ator.agent.extension import Waker
from ator.agent.hooks import Injection, LoopHook
from ator.agent.state import TurnContext, TurnState
from ator.store import mailbox
from ator.store.database import Database
from ator.store.scope import Scope

__all__ = ["NoticeInjector", "deliver"]


async def deliver(db: Database, waker: Waker, scope: Scope, thread_id: UUID, *, claim: str,
                  source: str, text: str, data: dict[str, Any] | None = None) -> bool:
    """Put one notice in the thread's mailbox under `claim` and wake the thread. `text` is
    what the model reads (wrapped as data from `source`); `data` is kept beside it for
    readers of the event. True when this call told the thread (False: told before, or the
    thread is gone). A wake lost after the commit is made up by the reaper's sweep of
    pending mailbox items."""
    told = await mailbox.notify(db, scope, thread_id, claim=claim,
                                content={"source": source, "text": text, **(data or {})})
    if told:
        await waker.notify(scope, thread_id)
    return told


class NoticeInjector(LoopHook):
    """Between steps, the notices of one claim prefix waiting for the running turn's thread.
    `wants(turn)` says whether this turn may have any (one read per step only then)."""

    def __init__(self, db: Database, prefix: str, wants: Callable[[TurnContext], bool]) -> None:
        self.db = db
        self.prefix = prefix
        self.wants = wants

    async def between_steps(self, turn: TurnContext, state: TurnState) -> Sequence[Injection]:
        if not self.wants(turn):
            return ()
        pending = await mailbox.pending_notices(self.db, Scope(turn.org_id), turn.thread_id,
                                                self.prefix)
        return [Injection("notification", {**content, "client_message_id": cmid,
                                           "mailbox_id": str(mid)}, mailbox_ids=(mid,))
                for mid, cmid, content in pending]
