"""The provider transport (net/h1.py) against raw asyncio servers whose bytes the tests write
by hand: keep-alive, chunked and close-delimited bodies, a peer that dies mid-body, stale
keep-alive connections, timeouts, flow control, TLS, a thousand streams at once, and the
official openai SDK on top of it."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest

from ator.errors import EgressBlocked
from ator.net import Egress, EgressPolicy, StaticResolver
from ator.net.h1 import H1Transport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """An asyncio server running `handler` per connection; counts connections."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls,
                                                  limit=1 << 22)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request: its head and its body (content-length or chunked)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.partition(b":") for line in lines[1:] if line)}
    if headers.get(b"transfer-encoding") == b"chunked":
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            data = await reader.readexactly(size + 2)
            if size == 0:
                return head, body
            body += data[:-2]
    return head, await reader.readexactly(int(headers.get(b"content-length", b"0")))


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%b\r\n%b" % (len(body), extra, body)


def egress_for(*hosts: str) -> Egress:
    return Egress(EgressPolicy(allow_networks=(ipaddress.ip_network("127.0.0.1/32"),)),
                  resolver=StaticResolver({h: ["127.0.0.1"] for h in hosts}))


@asynccontextmanager
async def client(port: int, *, scheme: str = "http", host: str = "127.0.0.1",
                 timeout: float = 10.0, transport: H1Transport | None = None,
                 ) -> AsyncIterator[httpx2.AsyncClient]:
    egress = egress_for(host)
    async with egress.httpx2_client(base_url=f"{scheme}://{host}:{port}", timeout=timeout,
                                    transport=transport) as c:
        yield c


def inner(c: httpx2.AsyncClient) -> H1Transport:
    transport = c._transport._inner  # type: ignore[attr-defined]
    assert isinstance(transport, H1Transport)
    return transport


async def test_the_provider_client_speaks_through_h1_and_keeps_connections_alive() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            _, body = await read_request(reader)
            writer.write(ok(b"echo:" + body))
            await writer.drain()

    async with RawServer(handler) as server, client(server.port) as c:
        assert isinstance(inner(c), H1Transport)
        for i in range(5):
            r = await c.post("/v1/x?q=1", content=b"n%d" % i)
            assert (r.status_code, r.content) == (200, b"echo:n%d" % i)
        assert server.connections == 1  # one warm connection, reused
        assert inner(c).idle_connections == 1


async def test_a_chunked_stream_arrives_piece_by_piece_and_a_chunked_body_is_sent() -> None:
    gate = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, body = await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n"
                     b"content-type: text/event-stream\r\n\r\n")
        for piece in (b"data: one\n\n", body, b"data: three\n\n"):
            writer.write(b"%x\r\n%b\r\n" % (len(piece), piece))
            await writer.drain()
            await gate.wait()
            gate.clear()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        await reader.read()

    async def parts() -> AsyncIterator[bytes]:
        yield b"data: "
        yield b"two\n\n"

    async with RawServer(handler) as server, client(server.port) as c:
        seen = []
        async with c.stream("POST", "/s", content=parts()) as r:
            async for piece in r.aiter_bytes():
                seen.append(piece)  # each piece arrives before the server sends the next
                gate.set()
        assert seen == [b"data: one\n\n", b"data: two\n\n", b"data: three\n\n"]
        assert inner(c).idle_connections == 1


async def test_a_peer_that_dies_mid_body_is_a_protocol_error_and_the_connection_is_dropped(
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part")
        await writer.drain()

    async with RawServer(handler) as server, client(server.port) as c:
        with pytest.raises(httpx2.RemoteProtocolError, match="complete message body"):
            await c.get("/")
        assert inner(c).idle_connections == 0 and inner(c).open_connections == 0


async def test_a_close_delimited_body_ends_when_the_peer_closes() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")
        await writer.drain()

    async with RawServer(handler) as server, client(server.port) as c:
        r = await c.get("/")
        assert r.content == b"all of it"
        assert inner(c).idle_connections == 0


async def test_a_keep_alive_connection_closed_by_the_server_is_replaced_transparently() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(ok(b"fine"))  # says keep-alive, then closes anyway
        await writer.drain()

    async with RawServer(handler) as server, client(server.port) as c:
        assert (await c.post("/", content=b"a")).content == b"fine"
        await asyncio.sleep(0.05)  # the close reaches the client while the connection idles
        assert (await c.post("/", content=b"b")).content == b"fine"
        assert server.connections == 2


async def test_a_stale_connection_that_dies_on_reuse_is_retried_once_on_a_new_one() -> None:
    first = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(ok(b"fine"))
        await writer.drain()
        if not first.is_set():
            first.set()
            await read_request(reader)  # takes the second request and dies without a byte
            writer.transport.abort()
            return
        await reader.read()

    async with RawServer(handler) as server, client(server.port) as c:
        assert (await c.post("/", content=b"a")).content == b"fine"
        assert (await c.post("/", content=b"b")).content == b"fine"
        assert server.connections == 2


async def test_an_answer_before_the_whole_body_was_taken_is_read_not_lost() -> None:
    """A proxy refusing a body that is too large answers 413 at once and closes without
    reading it; the caller (compaction) must see the 413, not a write error."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 9\r\n"
                     b"connection: close\r\n\r\ntoo large")
        await writer.drain()
        await asyncio.sleep(0.1)

    async with RawServer(handler) as server, client(server.port) as c:
        r = await c.post("/v1/messages", content=b"x" * 16_000_000)
        assert (r.status_code, r.content) == (413, b"too large")
        assert inner(c).open_connections == 0


async def test_a_silent_server_is_a_read_timeout() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    async with RawServer(handler) as server, client(server.port, timeout=0.3) as c:
        with pytest.raises(httpx2.ReadTimeout):
            await c.get("/")
        assert inner(c).open_connections == 0


async def test_a_large_body_read_slowly_is_paused_and_complete() -> None:
    body = bytes(range(256)) * 20_000  # 5 MB

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(ok(body))
        await writer.drain()
        await reader.read()

    async with RawServer(handler) as server, client(server.port) as c:
        got = bytearray()
        most = 0
        async with c.stream("GET", "/big") as r:
            async for piece in r.aiter_raw():
                got += piece
                most = max(most, inner(c)._open and next(iter(inner(c)._open)).buffered)
                await asyncio.sleep(0)
        assert bytes(got) == body
        assert most <= 512 * 1024  # reading paused instead of buffering the whole body


async def test_a_connection_the_guard_did_not_admit_is_refused() -> None:
    transport = H1Transport()
    with pytest.raises(EgressBlocked):
        await transport.handle_async_request(httpx2.Request("GET", "http://127.0.0.1:9/"))


async def test_a_thousand_streams_at_once_then_the_idle_pool_is_bounded() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            _, body = await read_request(reader)
            await asyncio.sleep(0.2)
            writer.write(ok(body))
            await writer.drain()

    async with RawServer(handler) as server, client(server.port) as c:
        async def one(i: int) -> bytes:
            r = await c.post("/", content=b"%d" % i)
            return r.content

        got = await asyncio.gather(*(one(i) for i in range(1000)))
        assert got == [b"%d" % i for i in range(1000)]
        assert server.connections == 1000
        assert inner(c).idle_connections == 100  # max_keepalive; the rest were closed
        assert inner(c).open_connections == 100
        assert (await one(7)) == b"7" and server.connections == 1000  # reused


def _self_signed(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "models.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("models.test"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    (tmp / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
    trusting = ssl.create_default_context(cafile=str(tmp / "cert.pem"))
    return server, trusting


async def test_tls_checks_the_certificate_against_the_host_name(tmp_path: Path) -> None:
    server_tls, trusting = _self_signed(tmp_path)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(ok(b"secure"))
            await writer.drain()

    async with RawServer(handler, tls=server_tls) as server:
        async with client(server.port, scheme="https", host="models.test",
                          transport=H1Transport(verify=trusting)) as c:
            assert (await c.get("/")).content == b"secure"
            assert (await c.get("/")).content == b"secure"
            assert server.connections == 1
        # The default trust store does not know this certificate.
        async with client(server.port, scheme="https", host="models.test") as c:
            with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await c.get("/")
        # A trusted certificate for another name is refused too.
        async with client(server.port, scheme="https", host="other.test",
                          transport=H1Transport(verify=trusting)) as c:
            with pytest.raises(httpx2.ConnectError, match=r"match|mismatch"):
                await c.get("/")


async def _sdk_streams() -> None:
    from openai import AsyncOpenAI

    from ator.testing.paced import PacedModel

    async with PacedModel(duration=0.2, chunks=5, text="abcde") as model:
        egress = egress_for("127.0.0.1")
        async with egress.httpx2_client() as http:
            sdk = AsyncOpenAI(api_key="k", base_url=model.base_url, http_client=http)
            for _ in range(3):
                stream = await sdk.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
                text = "".join([c.choices[0].delta.content or "" async for c in stream
                                if c.choices])
                assert text.strip() == "abcde"
            assert inner(http).idle_connections == 1


async def test_the_openai_sdk_streams_through_it() -> None:
    await _sdk_streams()


def test_the_openai_sdk_streams_through_it_on_uvloop() -> None:
    """`ator serve` runs on uvloop (its transports are not asyncio.Transport subclasses)."""
    uvloop = pytest.importorskip("uvloop")  # not on Windows, where serve runs on asyncio
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_sdk_streams())
