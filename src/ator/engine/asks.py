"""Asking a thread: submit a message and wait for the turn that takes it to end, on any
replica (layer: engine; imports coord, store, engine.follow, engine.stream, engine.actor).

`Ator.ask` and the extensions that run turns of their own (a workflow's `agent` step,
through `Kernel.asker`) share this one loop: it follows the coordinator's notices of
committed events (no polling), and after a silence of a lease TTL (or lost notices) it
catches up from the database, from the message's own event. A resend with the same client
id submits nothing and follows the turn that took the first — also when that turn already
ended (the catch-up finds it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from uuid import UUID

from ator.coord.base import Coordinator
from ator.engine.actor import Wakes
from ator.engine.follow import TurnFollow
from ator.engine.stream import ThreadFollow
from ator.store import events as event_store
from ator.store import mailbox as mailbox_store
from ator.store.database import Database
from ator.store.records import MailboxItem
from ator.store.scope import Scope

__all__ = ["Asks", "Submit", "TurnResult"]

#: Put a user message in a thread's mailbox and wake it: (item, created).
Submit = Callable[[Scope, UUID, str, str], Awaitable[tuple[MailboxItem, bool]]]


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
    error: str | None = None  # why a turn that did not end `done` ended (a cap's words)


class Asks:
    def __init__(self, db: Database, coord: Coordinator, wakes: Wakes, lease_ttl: float) -> None:
        self.db = db
        self.coord = coord
        self.wakes = wakes
        self.lease_ttl = lease_ttl

    async def submit(self, scope: Scope, thread_id: UUID, text: str,
                     cmid: str) -> tuple[MailboxItem, bool]:
        """Put a user message in the thread's mailbox and have it run: (item, created).
        To an idle thread this is one statement, the turn's start (`Actor.post`);
        otherwise the insert, then a wake. A resend (same `cmid`) runs nothing."""
        post = mailbox_store.Post.message(scope, cmid, text)
        taken = await self.wakes.post(scope, thread_id, post)
        if taken is not None:
            return taken, True
        item, created = await mailbox_store.submit_post(self.db, scope, thread_id, post)
        if created:
            await self.wakes.notify(scope, thread_id)
        return item, created

    async def ask(self, scope: Scope, thread_id: UUID, text: str, *, client_message_id: str,
                  timeout: float = 600.0, submit: Submit | None = None) -> TurnResult:
        """Submit (idempotent per `client_message_id`) and wait for the turn that takes the
        message to end. Raises TimeoutError after `timeout` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # Subscribed before submitting, so the notices hold all of the turn; the cursor is
        # learned from them (or from the message's own event after a silence).
        async with ThreadFollow(self.db, self.coord, scope, thread_id,
                                after_seq=None) as reader:
            item, _created = await (submit or self.submit)(scope, thread_id, text,
                                                            client_message_id)
            follow = TurnFollow(str(item.id))
            while not follow.done:
                left = deadline - loop.time()
                if left <= 0:
                    raise TimeoutError(f"no reply within {timeout:g}s")
                frames = await reader.next(min(left, self.lease_ttl))
                if frames is None or reader.lost:
                    # Silence for a lease TTL, or notices lost to a full inbox: read the truth.
                    frames = await self._catch_up(scope, reader, follow)
                follow.feed(frames)
        assert follow.ended is not None and follow.turn_id is not None
        data = follow.ended
        return TurnResult(
            turn_id=UUID(follow.turn_id), status=str(data.get("status")),
            stop_reason=str(data.get("stop_reason")), text=follow.text(),
            usage=dict(data.get("usage") or {}),
            cost_usd=Decimal(str(data.get("cost_usd", "0"))), events=follow.frames,
            error=data.get("error"),
        )

    async def _catch_up(self, scope: Scope, reader: ThreadFollow, follow: TurnFollow
                        ) -> list[dict[str, Any]]:
        """What was committed since the follower's position (a notice was lost)."""
        if follow.turn_id is None:
            seq = await event_store.message_seq(self.db, scope, reader.thread_id,
                                                follow.mailbox_id)
            if seq is None:
                return []  # not taken by a turn yet
            follow.seq = seq - 1  # rewind: frames before our message are not ours
            reader.rewind(seq - 1)
        elif reader.seq is None:
            reader.rewind(follow.seq)
        return await reader.catch_up()
