"""The gateway's own refusals as JSON-RPC errors any MCP client can read (layer: gateway;
imports jsonenc).

What `/mcp` refuses before the SDK sees the request (no key, a key over its rate limit, a
session that is not live, the org's change streams full) is answered at the HTTP status
that says it (401, 429, 404, 503) with a JSON-RPC error body (`application/json`): the SDK's
client surfaces a non-2xx body only when it is a JSON-RPC error in `application/json` (a
`problem+json` body reached the owner as "Server returned an error response"). The error's
`data` is ator's problem object (type, title, status, detail, stable `code`, and facts such
as `retry_after`), so a reader of either shape finds the same fields.

JSON-RPC codes (stable; the implementation-defined server range):

    -32001 unauthenticated     -32029 rate_limited     -32003 unavailable
    -32600 Session not found   (the spec's own answer for a session that is not live)

Tool refusals (unknown tool, denied) are answered by the catalog as -32602 with the same
`data.code`; a tool that ran and failed is a result with `isError` (gateway/catalog.py).
"""

from __future__ import annotations

from typing import Any

from starlette.types import Send

from ator import jsonenc

__all__ = ["RPC_CODES", "refuse", "session_not_found"]

RPC_CODES = {"unauthenticated": -32001, "rate_limited": -32029, "unavailable": -32003}


async def refuse(send: Send, status: int, code: str, detail: str,
                 headers: list[tuple[bytes, bytes]] | None = None, **facts: Any) -> None:
    """Answer a JSON-RPC error whose `data` is the problem (`code` one of RPC_CODES)."""
    problem = {"type": f"https://ator.dev/problems/{code}",
               "title": code.replace("_", " ").capitalize(), "status": status,
               "detail": detail, "code": code, **facts}
    await _send(send, status, {"code": RPC_CODES[code], "message": detail, "data": problem},
                headers)


async def session_not_found(send: Send) -> None:
    await _send(send, 404, {"code": -32600, "message": "Session not found",
                            "data": {"code": "session_not_found"}}, None)


async def _send(send: Send, status: int, error: dict[str, Any],
                headers: list[tuple[bytes, bytes]] | None) -> None:
    body = jsonenc.encode({"jsonrpc": "2.0", "id": None, "error": error})
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        *(headers or [])]})
    await send({"type": "http.response.body", "body": body})
