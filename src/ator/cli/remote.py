"""A small client for an ator server's HTTP API (layer: cli; imports httpx only).

Used by `ator chat --url`. It talks to a server the user named, with the user's key, so it
is not egress of the runtime and does not go through the SSRF guard. Problem+json answers
become `RemoteError` with the server's stable `code` and `detail`; transport failures become
`RemoteError` with code `unreachable`.
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["ApiClient", "RemoteError"]


class RemoteError(Exception):
    def __init__(self, message: str, *, status: int | None = None, code: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


class ApiClient:
    """JSON in, JSON out, `Authorization: Bearer <key>` on every request."""

    def __init__(self, base_url: str, key: str, *, timeout: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {key}", "User-Agent": "ator-cli"},
            timeout=timeout,
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def get(self, path: str, *, params: dict[str, Any] | None = None,
                  timeout: float | None = None) -> dict[str, Any]:
        return await self._request("GET", path, params=params, timeout=timeout)

    async def post(self, path: str, body: dict[str, Any], *, retries: int = 0) -> dict[str, Any]:
        """POST; `retries` > 0 only for requests that are idempotent on the server."""
        for attempt in range(retries + 1):
            try:
                return await self._request("POST", path, json=body)
            except RemoteError as exc:
                if exc.code != "unreachable" or attempt == retries:
                    raise
        raise AssertionError("unreachable")  # the loop always returns or raises

    async def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._request("PATCH", path, json=body)

    async def delete(self, path: str) -> dict[str, Any]:
        return await self._request("DELETE", path)

    async def _request(self, method: str, path: str, *, json: Any = None,
                       params: dict[str, Any] | None = None,
                       timeout: float | None = None) -> dict[str, Any]:
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        try:
            response = await self._http.request(method, path, json=json, params=params, **extra)
        except httpx.TransportError as exc:
            raise RemoteError(f"cannot reach {self.base_url}: {exc!r}",
                              code="unreachable") from exc
        if response.status_code >= 400:
            raise _problem(response)
        if not response.content:
            return {}
        body = response.json()
        if not isinstance(body, dict):
            raise RemoteError(f"{method} {path}: expected a JSON object", code="bad_response")
        return body


def _problem(response: httpx.Response) -> RemoteError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "detail" in body:
        return RemoteError(str(body["detail"]), status=response.status_code,
                           code=str(body.get("code", "error")))
    return RemoteError(f"HTTP {response.status_code} from {response.request.url}",
                       status=response.status_code)
