"""Requests first at the HTTP edge (layer: api; imports starlette's ASGI types).

`RequestsFirst` counts, in the runtime's `Foreground` (ator/foreground.py), each request that
hands the process new work (a POST under /v1/threads: a thread, a message, a stop) from the
moment it reaches the app until its response starts. A turn about to start lets those go
first, for at most `ATOR_REQUESTS_FIRST_WAIT` seconds. Reads, long-polls, streams and the
socket gateway are not counted: they hand the process no work, and a long-poll waiting a
minute for an event must not hold every turn back for as long.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["RequestsFirst"]

_WORK = "/v1/threads"


class RequestsFirst:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        runtime = getattr(scope["app"].state, "ator", None) if "app" in scope else None
        if (runtime is None or scope["type"] != "http" or scope["method"] != "POST"
                or not scope["path"].startswith(_WORK)):
            await self.app(scope, receive, send)
            return
        foreground = runtime.foreground
        foreground.enter()
        answered = False

        async def answer(message: Message) -> None:
            nonlocal answered
            if not answered and message["type"] == "http.response.start":
                answered = True
                foreground.leave()
            await send(message)

        try:
            await self.app(scope, receive, answer)
        finally:
            if not answered:  # failed or disconnected before answering
                foreground.leave()
