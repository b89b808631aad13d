"""Sending a message and following its turn to the end, in-process or over HTTP (layer: cli;
imports engine.runtime, store, cli.remote, cli.render).

Both transports speak the same three verbs — send (idempotent per client message id), read
events after a seq (long-poll), stop — so one follower drives both: it waits for the `message`
event carrying our mailbox id to learn which turn took the message (turns may coalesce
several messages), then shows that turn's events until its `turn_ended`. In-process, token
deltas are drawn live as well; over HTTP each step appears when it is persisted.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from ator.cli.remote import ApiClient
from ator.cli.render import TurnView
from ator.engine.runtime import Ator
from ator.store import threads as thread_store
from ator.store.records import Event
from ator.store.scope import Scope

__all__ = ["Conversation", "LocalConversation", "RemoteConversation", "Sent", "TurnFollower"]

_WAIT = 20.0  # seconds per long-poll


@dataclass(frozen=True, slots=True)
class Sent:
    mailbox_id: str
    after_seq: int  # the thread's last seq before the message was sent


class Conversation(Protocol):
    thread_id: str

    async def send(self, text: str) -> Sent: ...

    async def events(self, after_seq: int, wait: float) -> list[dict[str, Any]]: ...

    async def stop(self) -> None: ...


def _event_dict(e: Event) -> dict[str, Any]:
    return {"seq": e.seq, "kind": e.kind, "data": e.data,
            "turn_id": str(e.turn_id) if e.turn_id else None}


class LocalConversation:
    """A thread of an `Ator` running in this process."""

    def __init__(self, ator: Ator, scope: Scope, thread_id: UUID) -> None:
        self.ator = ator
        self.scope = scope
        self.thread_id = str(thread_id)
        self._id = thread_id

    async def send(self, text: str) -> Sent:
        thread = await thread_store.get_thread(self.ator.db, self.scope, self._id)
        item, _ = await self.ator.submit(self.scope, self._id, text,
                                         client_message_id=uuid.uuid4().hex)
        return Sent(str(item.id), thread.last_seq)

    async def events(self, after_seq: int, wait: float) -> list[dict[str, Any]]:
        found = await self.ator.wait_events(self.scope, self._id, after_seq=after_seq,
                                            timeout=wait)
        return [_event_dict(e) for e in found]

    async def stop(self) -> None:
        await self.ator.stop(self.scope, self._id)

    @contextmanager
    def deltas_to(self, view: TurnView) -> Iterator[None]:
        """Draw this thread's token deltas on `view` while inside the block."""
        listeners = self.ator.runner.delta_listeners.setdefault(self._id, [])
        listeners.append(view.delta)
        try:
            yield
        finally:
            listeners.remove(view.delta)
            if not listeners:
                self.ator.runner.delta_listeners.pop(self._id, None)


class RemoteConversation:
    """A thread on an ator server, over its HTTP API."""

    def __init__(self, api: ApiClient, thread_id: str) -> None:
        self.api = api
        self.thread_id = thread_id

    async def send(self, text: str) -> Sent:
        thread = await self.api.get(f"/v1/threads/{self.thread_id}")
        body = {"text": text, "client_message_id": uuid.uuid4().hex}
        # Safe to resend: the server keeps one item per client_message_id.
        item = await self.api.post(f"/v1/threads/{self.thread_id}/messages", body, retries=2)
        return Sent(str(item["id"]), int(thread["last_seq"]))

    async def events(self, after_seq: int, wait: float) -> list[dict[str, Any]]:
        page = await self.api.get(
            f"/v1/threads/{self.thread_id}/events",
            params={"after_seq": after_seq, "wait": wait, "limit": 200},
            timeout=wait + 15.0,
        )
        return list(page["data"])

    async def stop(self) -> None:
        await self.api.post(f"/v1/threads/{self.thread_id}/stop", {})


class TurnFollower:
    """Follows the turn that takes one sent message, drawing it on a view.

    Keeps its position, so after an interruption (Ctrl-C: stop the turn) `run` can be called
    again to show the rest, up to the turn's end."""

    def __init__(self, conversation: Conversation, sent: Sent, view: TurnView) -> None:
        self.conversation = conversation
        self.sent = sent
        self.view = view
        self.seq = sent.after_seq
        self.turn_id: str | None = None
        self.ended: dict[str, Any] | None = None
        self._started: float | None = None  # loop time of the first run, for the footer

    def _ours(self, event: dict[str, Any]) -> bool:
        # A turn_ended names its turn in its data: the one closing a lost turn is written
        # by the next turn, so its own turn_id column is the next turn's.
        if event["kind"] == "turn_ended":
            return (event.get("data") or {}).get("turn_id") == self.turn_id
        return event.get("turn_id") == self.turn_id

    async def run(self, *, timeout: float) -> dict[str, Any]:
        """Returns the `turn_ended` event's data. Raises TimeoutError after `timeout` s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if self._started is None:
            self._started = loop.time()
        while self.ended is None:
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError(f"the turn did not end within {timeout:g}s")
            for event in await self.conversation.events(self.seq, min(_WAIT, left)):
                self.seq = max(self.seq, int(event["seq"]))
                if self.turn_id is None:
                    mailbox_id = (event.get("data") or {}).get("mailbox_id")
                    if event["kind"] == "message" and mailbox_id == self.sent.mailbox_id:
                        self.turn_id = str(event["turn_id"])
                        self.view.started(self.turn_id)
                    continue
                if not self._ours(event):
                    continue
                self.view.event(event)
                if event["kind"] == "turn_ended":
                    self.ended = dict(event["data"])
                    self.view.ended(self.ended, loop.time() - self._started)
                    break
        return self.ended
