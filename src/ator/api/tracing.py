"""The request span (layer: api; imports starlette types, obs.tracing).

A pure ASGI middleware, installed only when tracing is on (api/app.py): one server span per
HTTP request, continuing the caller's `traceparent` header when it sends one, named by
method and matched route, with the request id beside it. Socket.io and the MCP gateway pass
through it like any request.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ator.context import request_id_var
from ator.obs import tracing

__all__ = ["TraceRequests"]


class TraceRequests:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        parent = None
        for name, value in scope.get("headers", ()):
            if name == b"traceparent":
                parent = value.decode("latin-1")
                break
        method = scope.get("method", "GET")
        with tracing.span(f"HTTP {method}", {"http.request.method": method,
                                             "url.path": scope.get("path", "")},
                          parent=parent, kind="server") as span:
            status = 0

            async def sending(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                await send(message)

            try:
                await self.app(scope, receive, sending)
            finally:
                route = scope.get("route")
                path = getattr(route, "path", None)
                span.set_attributes({"http.response.status_code": status or None,
                                     "http.route": path, "ator.request_id": request_id_var.get()})
                if path:
                    span.rename(f"{method} {path}")
