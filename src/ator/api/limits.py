"""Limits the HTTP edge puts on what one request may take (layer: api; imports starlette's
ASGI types, api.problems, ator.errors).

- `BodyLimit`: a pure ASGI middleware, run before routing, body parsing and auth. A declared
  `Content-Length` over the limit is refused at once with 413 `payload_too_large` (the body
  is never read into the app); a body of unknown length (chunked) is counted as it streams
  and cut at the limit: the client gets the 413 and the app sees a disconnect. Nothing is
  buffered here, so memory per request stays at the server's read buffer whatever is sent.
- `WaitSlots`: concurrent long-polls per user and per org (429 `too_many_waits` beyond).
  Counted per process, on purpose: what a long-poll holds (a task, an inbox on the shared
  subscription, a share of this process's event loop and database pool) is per process, and
  a per-process count costs no coordinator round trip and cannot leak slots when a replica
  dies. A user may thus hold up to `replicas x per_user` waits across a deployment.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ator.api.problems import problem
from ator.errors import RateLimited

__all__ = ["BodyLimit", "TooManyWaits", "WaitSlots"]


def _declared_length(scope: Scope) -> int | None:
    """The Content-Length header as a number; None if absent; -1 if not a number."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else -1
    return None


class BodyLimit:
    """Refuse request bodies over `max_bytes` (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> Any:
        return problem(413, "payload_too_large",
                       f"the request body exceeds the limit of {self.max_bytes} bytes",
                       limit=self.max_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _declared_length(scope)
        if declared is not None and declared < 0:
            await problem(400, "bad_request", "the Content-Length header is not a number")(
                scope, receive, send)
            return
        if declared is not None and declared > self.max_bytes:
            await self._too_large()(scope, receive, send)
            return
        await self.app(scope, *self._counting(scope, receive, send))

    def _counting(self, scope: Scope, receive: Receive, send: Send) -> tuple[Receive, Send]:
        received = 0
        started = False  # the app began its response: too late for a 413
        cut = False  # the body went over the limit: the app only sees a disconnect
        refused = False  # we answered 413: the app's own answer is dropped

        async def limited_receive() -> Message:
            nonlocal received, cut, refused
            if cut:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    cut = True
                    if not started:
                        refused = True
                        await self._too_large()(scope, receive, send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        return limited_receive, guarded_send


class TooManyWaits(RateLimited):
    code = "too_many_waits"


class WaitSlots:
    """Counts concurrent waits per user and per org in this process."""

    def __init__(self, *, per_user: int, per_org: int) -> None:
        self.per_user = per_user
        self.per_org = per_org
        self._users: dict[UUID, int] = {}
        self._orgs: dict[UUID, int] = {}

    def held(self, org_id: UUID, user_id: UUID | None = None) -> int:
        """Waits held now by the user (or by the whole org when `user_id` is None)."""
        if user_id is None:
            return self._orgs.get(org_id, 0)
        return self._users.get(user_id, 0)

    @contextmanager
    def hold(self, org_id: UUID, user_id: UUID) -> Iterator[None]:
        """Hold one wait slot for the duration; raises TooManyWaits (429) when the user or
        the org already holds its cap. Slots are freed however the body ends."""
        if self._users.get(user_id, 0) >= self.per_user:
            raise TooManyWaits(f"more than {self.per_user} concurrent waits for this user",
                               retry_after=1.0)
        if self._orgs.get(org_id, 0) >= self.per_org:
            raise TooManyWaits(f"more than {self.per_org} concurrent waits for this org",
                               retry_after=1.0)
        self._users[user_id] = self._users.get(user_id, 0) + 1
        self._orgs[org_id] = self._orgs.get(org_id, 0) + 1
        try:
            yield
        finally:
            for counts, key in ((self._users, user_id), (self._orgs, org_id)):
                left = counts[key] - 1
                if left:
                    counts[key] = left
                else:
                    del counts[key]
