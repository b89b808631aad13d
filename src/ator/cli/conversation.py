"""Sending a message and following its turn to the end, in-process or over HTTP (layer: cli;
imports engine.runtime, store, cli.remote, cli.render).

Both transports speak the same three verbs — send (idempotent per client message id), read
events after a seq (long-poll), stop — so one follower drives both: it waits for the `message`
event carrying our mailbox id to learn which turn took the message (turns may coalesce
several messages), then shows that turn's events until its `turn_ended`. In-process, token
deltas are drawn live as well (from the coordinator's delta channel, so they come from
whichever replica runs the turn); over HTTP each step appears when it is persisted.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from ator.cli.remote import ApiClient
from ator.cli.render import TurnView
from ator.engine.follow import TurnFollow
from ator.engine.runtime import Ator
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


class LocalConversation:
    """A thread of an `Ator` running in this process."""

    def __init__(self, ator: Ator, scope: Scope, thread_id: UUID) -> None:
        self.ator = ator
        self.scope = scope
        self.thread_id = str(thread_id)
        self._id = thread_id
        self._views: list[TurnView] = []
        self._deltas: asyncio.Task[None] | None = None

    async def send(self, text: str) -> Sent:
        await self._listen_deltas()
        thread = await self.ator.thread(self.scope, self._id)
        item, _ = await self.ator.submit(self.scope, self._id, text,
                                         client_message_id=uuid.uuid4().hex)
        return Sent(str(item.id), thread.last_seq)

    async def events(self, after_seq: int, wait: float) -> list[dict[str, Any]]:
        return await self.ator.wait_events(self.scope, self._id, after_seq=after_seq,
                                           timeout=wait)

    async def stop(self) -> None:
        await self.ator.stop(self.scope, self._id)

    @contextmanager
    def deltas_to(self, view: TurnView) -> Iterator[None]:
        """Draw this thread's token deltas on `view` while inside the block."""
        self._views.append(view)
        try:
            yield
        finally:
            self._views.remove(view)

    async def _listen_deltas(self) -> None:
        if self._deltas is not None:
            return
        ready = asyncio.Event()
        self._deltas = asyncio.create_task(self._read_deltas(ready))
        await ready.wait()

    async def _read_deltas(self, ready: asyncio.Event) -> None:
        async with self.ator.deltas(self._id) as batches:
            ready.set()
            async for batch in batches:
                for delta in batch:
                    for view in list(self._views):
                        view.delta(delta)

    async def aclose(self) -> None:
        if self._deltas is not None:
            self._deltas.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._deltas
            self._deltas = None


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
        self.view = view
        self.follow = TurnFollow(sent.mailbox_id, after_seq=sent.after_seq)
        self._started: float | None = None  # loop time of the first run, for the footer

    async def run(self, *, timeout: float) -> dict[str, Any]:
        """Returns the `turn_ended` event's data. Raises TimeoutError after `timeout` s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if self._started is None:
            self._started = loop.time()
        follow = self.follow
        while follow.ended is None:
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError(f"the turn did not end within {timeout:g}s")
            frames = await self.conversation.events(follow.seq, min(_WAIT, left))
            for frame in follow.feed(frames):
                if frame["type"] == "message":
                    if frame is follow.frames[0]:
                        self.view.started(str(follow.turn_id))
                    continue
                self.view.event(frame["data"])  # the renderer draws the event record
            if follow.ended is not None:
                self.view.ended(follow.ended, loop.time() - self._started)
        return follow.ended
