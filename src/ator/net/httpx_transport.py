"""The guarded transport for `httpx` clients: plain HTTP and the MCP SDK (layer: net; imports
errors, net.guard, httpx and httpcore).

`GuardedTransport` admits every request through the EgressGuard (one resolution), opens
connections only to the addresses the guard validated (`PinnedBackend`, so no second lookup)
while the URL keeps the name (Host header, TLS SNI and certificate checks stay on it), follows
redirects itself so each hop is admitted again and credentials never cross origins, clamps
timeouts to the policy and bounds the response body.

net/httpx2_transport.py is this file with httpx→httpx2 and httpcore→httpcore2 (the provider
SDKs' stack); a test pins the two to stay identical modulo those names.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any, Final

import httpcore
import httpx

from ator.errors import EgressBlocked
from ator.net.guard import (
    CREDENTIAL_HEADERS,
    Destination,
    EgressGuard,
    pinned,
    pinned_addresses,
)

__all__ = ["BoundedStream", "GuardedTransport", "PinnedBackend", "pinned_http_transport"]

_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects to the addresses the guard admitted for (host, port), in order; never
    resolves. A connection the guard did not admit is refused (EgressBlocked)."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        failure: Exception | None = None
        for address in pinned_addresses(host, port):
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc  # try the next validated address, like getaddrinfo order
        assert failure is not None  # pinned_addresses never answers an empty tuple
        raise failure

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise EgressBlocked(path, "unix sockets are not reachable through egress")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def pinned_http_transport(**kwargs: Any) -> httpx.AsyncHTTPTransport:
    """httpx's own transport (pooling, TLS, HTTP/1.1) whose connections are pinned. Never
    reads proxies or certificates from the environment."""
    # No cap on concurrent connections per client: one provider client serves every turn of
    # its setup, and the library default (100) queued the 101st model stream behind the
    # first hundred. Turns in flight are bounded by the engine's admission instead.
    kwargs.setdefault("limits", httpx.Limits(max_connections=None,
                                             max_keepalive_connections=100))
    transport = httpx.AsyncHTTPTransport(trust_env=False, **kwargs)
    pool = transport._pool  # private but stable; tests prove the pin takes effect
    if not isinstance(pool, httpcore.AsyncConnectionPool):
        raise TypeError(f"unexpected httpx pool {type(pool).__name__}")
    pool._network_backend = PinnedBackend()
    return transport


class BoundedStream(httpx.AsyncByteStream):
    """A response body that raises EgressBlocked past `limit` bytes."""

    def __init__(self, inner: httpx.AsyncByteStream, limit: int, host: str) -> None:
        self._inner = inner
        self._limit = limit
        self._host = host

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise EgressBlocked(self._host, f"response larger than {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class GuardedTransport(httpx.AsyncBaseTransport):
    """Every request through the guard; `inner` does the I/O (default: a pinned pool; tests
    may pass httpx.MockTransport). `secret_headers` are dropped across origins on redirect,
    beyond CREDENTIAL_HEADERS."""

    def __init__(
        self,
        guard: EgressGuard,
        *,
        inner: httpx.AsyncBaseTransport | None = None,
        secret_headers: Iterable[str] = (),
    ) -> None:
        self.guard = guard
        self._inner = inner or pinned_http_transport()
        self._secret = CREDENTIAL_HEADERS | {h.lower() for h in secret_headers}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        policy = self.guard.policy
        hops = 0
        while True:
            destination = await self._admit(request)
            response = await self._send(request, destination)
            location = response.headers.get("location")
            if response.status_code not in _REDIRECTS or location is None:
                return await self._bounded(request, response)
            await response.aclose()
            if hops >= policy.max_redirects:
                raise EgressBlocked(request.url.host,
                                    f"more than {policy.max_redirects} redirects")
            request = self._redirect(request, response.status_code, location)
            hops += 1

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def _admit(self, request: httpx.Request) -> Destination:
        url = request.url
        if request.headers.get("host", "").lower() != url.netloc.decode("ascii").lower():
            raise EgressBlocked(url.host, "the Host header must name the URL's host")
        port = url.port or _DEFAULT_PORTS.get(url.scheme, 0)
        try:
            return await self.guard.admit(url.scheme, url.raw_host.decode("ascii"), port)
        except OSError as exc:
            raise httpx.ConnectError(f"cannot resolve {url.host}: {exc}", request=request) from exc

    async def _send(self, request: httpx.Request, destination: Destination) -> httpx.Response:
        policy = self.guard.policy
        timeout = dict(request.extensions.get("timeout") or {})
        for phase, cap in (("connect", policy.connect_timeout), ("read", policy.read_timeout),
                           ("pool", policy.connect_timeout)):
            given = timeout.get(phase)
            timeout[phase] = cap if given is None else min(given, cap)
        timeout.setdefault("write", policy.read_timeout)
        request.extensions["timeout"] = timeout
        with pinned(destination):
            return await self._inner.handle_async_request(request)

    async def _bounded(self, request: httpx.Request, response: httpx.Response) -> httpx.Response:
        limit = self.guard.policy.max_response_bytes
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            await response.aclose()
            raise EgressBlocked(request.url.host, f"response larger than {limit} bytes")
        if isinstance(response.stream, httpx.AsyncByteStream):
            response.stream = BoundedStream(response.stream, limit, request.url.host)
        return response

    def _redirect(self, request: httpx.Request, status: int, location: str) -> httpx.Request:
        url = request.url.join(location)
        method = request.method
        if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
            method = "GET"
        headers = httpx.Headers(request.headers)
        headers["host"] = url.netloc.decode("ascii")  # Request(stream=...) adds no Host itself
        if _origin(url) != _origin(request.url):
            for name in self._secret:
                headers.pop(name, None)
        stream: Any = request.stream
        if method != request.method:
            for name in ("content-length", "transfer-encoding", "content-type"):
                headers.pop(name, None)
            stream = httpx.ByteStream(b"")
        return httpx.Request(method, url, headers=headers, stream=stream,
                             extensions=dict(request.extensions))


def _origin(url: httpx.URL) -> tuple[str, str, int]:
    return url.scheme, url.host, url.port or _DEFAULT_PORTS.get(url.scheme, 0)
