"""A lean HTTP/1.1 transport for the provider SDKs' `httpx2` clients, on asyncio and httptools
(layer: net; imports net.guard, httpx2, httptools).

Why not httpx2's own transport (httpcore2 over anyio and h11): with a thousand model streams
at once to one endpoint, its pool scanned every connection on every request start and every
response close (O(n) each, about a tenth of `ator serve`'s CPU), and every streamed chunk
crossed anyio's cancel scopes and h11's pure-Python parser: together about a third of the
server's CPU in `bench/scale.py`. Here a connection is an asyncio Protocol whose bytes go
through httptools (llhttp, in C); idle connections wait in a stack per origin (O(1) to take
and give back); a streamed chunk costs one callback.

What it does: HTTP/1.1 over TCP or TLS (one shared TLS context, SNI and certificate checks
against the host name), keep-alive (an idle connection is reused for `keepalive_expiry`
seconds, at most `max_keepalive` idle per origin), content-length, chunked and
close-delimited response bodies, chunked request bodies, the request's timeouts (connect;
read, per wait for bytes; write, per wait for the socket to drain), and flow control (reading
pauses while more than `_HIGH_WATER` bytes wait for the consumer). A connection reused from
the pool that turns out closed before any byte of the response is replaced once by a new
one. What it does not do: HTTP/2, proxies, `Expect: 100-continue`, upgrades: the SDKs use
none of them.

It never resolves: a connection goes only to the addresses the egress guard pinned for the
request (`net.guard.pinned_addresses`, EgressBlocked otherwise), so it is used only under
`net.httpx2_transport.GuardedTransport`, which `net.egress.Egress` builds. Failures are
httpx2's exceptions (ConnectError, ConnectTimeout, ReadTimeout, WriteTimeout, WriteError,
RemoteProtocolError), which the SDKs turn into their connection and timeout errors.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator
from typing import Final, cast

import httptools
import httpx2

from ator.net.guard import pinned_addresses

__all__ = ["H1Transport"]

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_HIGH_WATER: Final = 256 * 1024  # bytes of response body buffered before reading pauses
_LOW_WATER: Final = 64 * 1024
_INCOMPLETE: Final = "peer closed connection without sending complete message body"

Origin = tuple[str, str, int]


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: the protocol asyncio feeds and the parser's callbacks."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.lost = False  # the socket is gone
        self.error: Exception | None = None  # what broke the response being read
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._reading_paused = False
        self.reset()

    def reset(self) -> None:
        """Ready for the next response on this connection."""
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self.keep_alive = False
        self.complete = False
        self.received = False  # any byte of this response arrived
        self.body: deque[bytes] = deque()
        self.buffered = 0
        self._informational = False

    # ---------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; they have its methods.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.error = httpx2.RemoteProtocolError(f"invalid HTTP response: {exc}")
            self.close()
        if self.buffered > _HIGH_WATER and not self._reading_paused and self.transport:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.headers_done and not self.complete and self.error is None \
                and self._close_delimited():
            self.complete = True  # the body ran until the peer closed, as it said it would
        self._wake()
        writable = self._writable
        if writable is not None and not writable.done():
            writable.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    # ---------------------------------------------------------------- httptools callbacks

    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if self.status < 200:  # 1xx: informational, the real response follows
            self._informational = True
            return
        self.keep_alive = self.parser.should_keep_alive()  # only known while parsing
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.buffered += len(body)

    def on_message_complete(self) -> None:
        if self._informational:
            self.reset()
            self.received = True
            return
        self.complete = True

    # ---------------------------------------------------------------- use

    def _close_delimited(self) -> bool:
        names = {name.lower() for name, _ in self.headers}
        return b"content-length" not in names and b"transfer-encoding" not in names

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float | None) -> None:
        """Until the parser has news (bytes, the end, an error or the peer closing)."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        except TimeoutError:
            raise httpx2.ReadTimeout(f"no data from the server for {timeout:g}s") from None
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def take(self) -> bytes | None:
        """The next buffered piece of body, resuming reading once the buffer drains."""
        if not self.body:
            return None
        piece = self.body.popleft()
        self.buffered -= len(piece)
        if self._reading_paused and self.buffered <= _LOW_WATER and self.transport \
                and not self.lost:
            self._reading_paused = False
            self.transport.resume_reading()
        return piece

    async def write(self, data: bytes, timeout: float | None) -> None:
        if self.lost or self.transport is None:
            raise httpx2.WriteError("the connection is closed")
        self.transport.write(data)
        writable = self._writable
        if writable is not None and not writable.done():
            try:
                await asyncio.wait_for(asyncio.shield(writable), timeout)
            except TimeoutError:
                raise httpx2.WriteTimeout(f"could not send for {timeout:g}s") from None
            if self.lost:
                raise httpx2.WriteError("the connection closed while sending")

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.lost and self.error is None

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.lost = True


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class _Body(httpx2.AsyncByteStream):
    """A response body as it arrives; closing it gives the connection back or closes it."""

    def __init__(self, owner: H1Transport, conn: _Connection, read_timeout: float | None,
                 reuse: bool) -> None:
        self._owner = owner
        self._conn = conn
        self._timeout = read_timeout
        self._reuse = reuse
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        while True:
            piece = conn.take()
            if piece is not None:
                yield piece
                continue
            if conn.complete:
                return
            if conn.error is not None:
                raise conn.error
            if conn.lost:
                raise httpx2.RemoteProtocolError(_INCOMPLETE)
            await conn.wait(self._timeout)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        conn = self._conn
        if self._reuse and conn.reusable():
            self._owner.give_back(conn)
        else:
            self._owner.discard(conn)


class H1Transport(httpx2.AsyncBaseTransport):
    """The transport: a keep-alive pool of `_Connection`s per origin."""

    def __init__(self, *, verify: ssl.SSLContext | None = None, max_keepalive: int = 100,
                 keepalive_expiry: float = 5.0) -> None:
        self._ssl = verify if verify is not None else httpx2.create_ssl_context(trust_env=False)
        self._max_keepalive = max_keepalive
        self._expiry = keepalive_expiry
        self._idle: dict[Origin, list[_Connection]] = {}
        self._open: set[_Connection] = set()

    @property
    def idle_connections(self) -> int:
        return sum(len(stack) for stack in self._idle.values())

    @property
    def open_connections(self) -> int:
        return len(self._open)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        scheme = url.scheme
        if scheme not in _DEFAULT_PORTS:
            raise httpx2.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}")
        origin = (scheme, url.raw_host.decode("ascii").lower(),
                  url.port or _DEFAULT_PORTS[scheme])
        timeouts = request.extensions.get("timeout") or {}
        head, chunked = _head(request)
        conn = self._take(origin)
        if conn is not None:
            try:
                return await self._exchange(conn, request, head, chunked, timeouts)
            except (httpx2.RemoteProtocolError, httpx2.WriteError):
                # A keep-alive connection the server closed meanwhile: nothing of a response
                # came, so the request was not taken; send it again on a new connection if
                # its body can be sent again.
                if conn.received or not isinstance(request.stream, httpx2.ByteStream):
                    raise
        conn = await self._connect(origin, timeouts.get("connect"))
        return await self._exchange(conn, request, head, chunked, timeouts)

    async def _exchange(self, conn: _Connection, request: httpx2.Request, head: bytes,
                        chunked: bool, timeouts: dict[str, float | None]) -> httpx2.Response:
        read_timeout = timeouts.get("read")
        try:
            try:
                await self._send(conn, request, head, chunked, timeouts.get("write"))
            except httpx2.WriteError:
                if not conn.received:
                    raise
                # The server answered before taking the whole body (a 413, say) and
                # closed: its answer is what the caller needs, so it is read below.
            while not conn.headers_done:
                if conn.error is not None:
                    raise conn.error
                if conn.lost:
                    raise httpx2.RemoteProtocolError(
                        "server disconnected without sending a response")
                await conn.wait(read_timeout)
        except BaseException:
            self.discard(conn)
            raise
        head_only = request.method == "HEAD"
        if head_only:
            conn.complete = True  # the parser cannot know a HEAD response has no body
        return httpx2.Response(
            status_code=conn.status,
            headers=conn.headers,
            stream=_Body(self, conn, read_timeout, reuse=not head_only),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": conn.reason.strip()},
            request=request,
        )

    async def _send(self, conn: _Connection, request: httpx2.Request, head: bytes,
                    chunked: bool, timeout: float | None) -> None:
        stream = request.stream
        if isinstance(stream, httpx2.ByteStream) and not chunked:
            await conn.write(head + b"".join(stream), timeout)  # one write, one packet
            return
        await conn.write(head, timeout)
        assert isinstance(stream, httpx2.AsyncByteStream)
        async for part in stream:
            if part:
                await conn.write(b"%x\r\n%b\r\n" % (len(part), part) if chunked else part,
                                 timeout)
        if chunked:
            await conn.write(b"0\r\n\r\n", timeout)

    async def _connect(self, origin: Origin, timeout: float | None) -> _Connection:
        scheme, host, port = origin
        tls = self._ssl if scheme == "https" else None
        loop = asyncio.get_running_loop()
        failure: Exception | None = None
        for address in pinned_addresses(host, port):  # EgressBlocked if the guard did not admit
            try:
                async with asyncio.timeout(timeout):
                    _, conn = await loop.create_connection(
                        lambda: _Connection(origin), address, port, ssl=tls,
                        server_hostname=host if tls is not None else None)
            except TimeoutError:
                failure = httpx2.ConnectTimeout(f"connecting to {host}:{port} timed out")
            except OSError as exc:  # refused, unreachable, TLS and certificate failures
                failure = httpx2.ConnectError(f"cannot connect to {host}:{port}: {exc}")
            else:
                self._open.add(conn)
                return conn
        assert failure is not None  # pinned_addresses never answers an empty tuple
        raise failure

    def _take(self, origin: Origin) -> _Connection | None:
        stack = self._idle.get(origin)
        if not stack:
            return None
        now = asyncio.get_running_loop().time()
        while stack:
            conn = stack.pop()  # the most recently used: the warmest
            if conn.lost or now - conn.idle_since > self._expiry:
                self.discard(conn)
                continue
            conn.reset()
            return conn
        return None

    def give_back(self, conn: _Connection) -> None:
        stack = self._idle.setdefault(conn.origin, [])
        now = asyncio.get_running_loop().time()
        conn.idle_since = now
        stack.append(conn)
        while stack and (len(stack) > self._max_keepalive
                         or now - stack[0].idle_since > self._expiry):
            self.discard(stack.pop(0))  # the oldest first

    def discard(self, conn: _Connection) -> None:
        conn.close()
        self._open.discard(conn)

    async def aclose(self) -> None:
        self._idle.clear()
        for conn in list(self._open):
            self.discard(conn)


def _head(request: httpx2.Request) -> tuple[bytes, bool]:
    """The request line and headers, and whether the body goes chunked."""
    chunked = False
    lines = [b"%b %b HTTP/1.1\r\n" % (request.method.encode("ascii"), request.url.raw_path)]
    for name, value in request.headers.raw:
        if name.lower() == b"transfer-encoding" and value.lower() == b"chunked":
            chunked = True
        lines.append(b"%b: %b\r\n" % (name, value))
    lines.append(b"\r\n")
    return b"".join(lines), chunked
