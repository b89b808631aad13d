"""The SSRF matrix: one list of attacks and one driver, reused by every egress surface.

A *surface* is "a way to make ator call a URL": `async def surface(url, egress) -> None` must
make exactly the outbound call that ator's feature would make (a provider's model call, later an
MCP connect or an HTTP workflow step), building its clients with `egress`. The driver runs each
case with that case's allowlist and fake DNS, requires `EgressBlocked` (code `egress_blocked`),
and requires that the loopback trap listeners saw no connection at all. Only loopback is ever a
real target; every other address in the matrix is refused before any connection is opened.

    await assert_ssrf_refused(my_surface)          # every case in CASES
    await assert_pins_first_answer(my_surface)     # the rebinding proof (one lookup, pinned)
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ator.errors import AtorError, EgressBlocked
from ator.net import Egress, EgressPolicy, StaticResolver, parse_ip
from ator.net.guard import parse_allowlist

Surface = Callable[[str, Egress], Awaitable[object]]

#: Where the allowlisted "good" server of a redirect case listens (not the trap's address).
ALLOWED_HOST = "127.0.0.3"


@dataclass(frozen=True)
class Case:
    """One attack. In `url`, {trap} is the trap listener's port and {allowed} the allowlisted
    redirector's; `redirect_to` is where the redirector sends the request."""

    name: str
    url: str
    dns: Mapping[str, Sequence[str] | Sequence[Sequence[str]]] = field(default_factory=dict)
    allow: tuple[str, ...] = ()
    redirect_to: str | None = None
    lookups: int | None = None  # exact number of DNS lookups the guard may do


CASES: list[Case] = [
    Case("loopback v4", "http://127.0.0.1:{trap}/"),
    Case("loopback v6", "http://[::1]:{trap}/"),
    Case("loopback over https", "https://127.0.0.1:{trap}/"),
    Case("cloud metadata", "http://169.254.169.254/latest/meta-data/"),
    Case("private 10/8", "http://10.0.0.1:{trap}/"),
    Case("private 172.16/12", "http://172.16.0.1/"),
    Case("private 192.168/16", "http://192.168.1.1/"),
    Case("cgnat 100.64/10", "http://100.64.0.1/"),
    Case("unspecified v4", "http://0.0.0.0:{trap}/"),
    Case("unspecified v6", "http://[::]:{trap}/"),
    Case("ipv4-mapped loopback", "http://[::ffff:127.0.0.1]:{trap}/"),
    Case("ipv4-compatible loopback", "http://[::127.0.0.1]:{trap}/"),
    Case("nat64 of private", "http://[64:ff9b::a00:1]/"),
    Case("6to4 of loopback", "http://[2002:7f00:1::1]/"),
    Case("link-local v6", "http://[fe80::1]/"),
    Case("unique-local v6", "http://[fd00::1]/"),
    Case("multicast", "http://224.0.0.1/"),
    Case("decimal spelling", "http://2130706433:{trap}/"),
    Case("octal spelling", "http://0177.0.0.1:{trap}/"),
    Case("hex spelling", "http://0x7f000001:{trap}/"),
    Case("short form 127.1", "http://127.1:{trap}/"),
    Case("short form 10.1", "http://10.1/"),
    # Refused by name where the URL is judged before the request (no lookup), else at admit.
    Case("localhost", "http://localhost:{trap}/", dns={"localhost": ["127.0.0.1", "::1"]}),
    Case("name resolving to private", "https://internal.test/", dns={"internal.test": ["10.0.0.5"]},
         lookups=1),
    Case("name with one private answer among public", "https://mixed.test:{trap}/",
         dns={"mixed.test": ["93.184.216.34", "127.0.0.1"]}, lookups=1),
    Case("name resolving to metadata", "https://metadata.test/",
         dns={"metadata.test": ["169.254.169.254"]}, lookups=1),
    Case("plain http to a public name", "http://public.test/",
         dns={"public.test": ["93.184.216.34"]}, lookups=1),
    Case("redirect from an allowlisted host to loopback", "http://{allowed_host}:{allowed}/",
         allow=(ALLOWED_HOST,), redirect_to="http://127.0.0.1:{trap}/"),
    Case("redirect from an allowlisted host to metadata", "http://{allowed_host}:{allowed}/",
         allow=(ALLOWED_HOST,), redirect_to="http://169.254.169.254/latest/meta-data/"),
    Case("redirect from an allowlisted name to a private name", "http://good.test:{allowed}/",
         dns={"good.test": [ALLOWED_HOST], "evil.test": ["127.0.0.1"]}, allow=("good.test",),
         redirect_to="http://evil.test:{trap}/"),
    # DNS rebinding: the first answer is refused; a guard that looked up again before
    # connecting would get the (allowlisted) trap. Exactly one lookup may happen.
    Case("rebinding name", "http://rebind.test:{trap}/",
         dns={"rebind.test": [["10.0.0.7"], ["127.0.0.1"]]}, allow=("127.0.0.1",), lookups=1),
]


class Listener:
    """A loopback TCP server that records every connection and answers each request with
    `reply` (bytes, formatted with nothing)."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.connections = 0
        self.requests: list[bytes] = []
        self.servers: list[asyncio.Server] = []
        self.port = 0

    async def start(self, host: str, port: int = 0, *, also_v6: bool = False) -> Listener:
        server = await asyncio.start_server(self._serve, host, port)
        self.servers.append(server)
        self.port = server.sockets[0].getsockname()[1]
        if also_v6 and socket.has_ipv6:
            with contextlib.suppress(OSError):  # a host without ::1 just has one trap less
                self.servers.append(await asyncio.start_server(self._serve, "::1", self.port))
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.requests.append(head)
            writer.write(self.reply)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # a client that hung up: nothing to answer
        finally:
            writer.close()

    async def aclose(self) -> None:
        for server in self.servers:
            server.close()
            await server.wait_closed()


def _response(status: int, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"content-length: {len(body)}", "connection: close",
             *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@contextlib.asynccontextmanager
async def listeners() -> AsyncIterator[tuple[Listener, Listener]]:
    """(trap, allowed): the trap on 127.0.0.1 and ::1 must never see a connection; the
    allowed one on ALLOWED_HOST redirects wherever a case says."""
    trap = await Listener(_response(200, {}, b"{}")).start("127.0.0.1", also_v6=True)
    allowed = await Listener(b"").start(ALLOWED_HOST)
    try:
        yield trap, allowed
    finally:
        await trap.aclose()
        await allowed.aclose()


class LoopbackOnly:
    """While active, a socket connect to anything but loopback raises instead of sending a
    packet, and is recorded: a broken guard fails the matrix without touching the network."""

    def __init__(self) -> None:
        self.attempts: list[object] = []

    def _check(self, address: object) -> None:
        host = address[0] if isinstance(address, tuple) else None
        ip = parse_ip(str(host)) if host is not None else None
        if ip is None or not ip.is_loopback:
            self.attempts.append(address)
            raise ConnectionRefusedError(f"test safety net: no connection to {address!r}")

    @contextlib.contextmanager
    def active(self) -> Iterator[LoopbackOnly]:
        original_connect, original_connect_ex = socket.socket.connect, socket.socket.connect_ex
        net = self

        def connect(sock: socket.socket, address: Any) -> None:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                net._check(address)
            original_connect(sock, address)

        def connect_ex(sock: socket.socket, address: Any) -> int:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                net._check(address)
            return original_connect_ex(sock, address)

        socket.socket.connect = connect  # type: ignore[method-assign]
        socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
        try:
            yield self
        finally:
            socket.socket.connect = original_connect  # type: ignore[method-assign]
            socket.socket.connect_ex = original_connect_ex  # type: ignore[method-assign]


def egress_for(allow: Sequence[str], dns: Mapping[str, object]) -> Egress:
    hosts, networks = parse_allowlist(allow)
    return Egress(EgressPolicy(allow_hosts=hosts, allow_networks=networks),
                  StaticResolver(dns))  # type: ignore[arg-type]


async def assert_ssrf_refused(surface: Surface, cases: Sequence[Case] = CASES) -> None:
    """Every case is refused with egress_blocked and no trap sees a connection."""
    failures: list[str] = []
    with LoopbackOnly().active() as net:
        async with listeners() as (trap, allowed):
            await _run_cases(surface, cases, trap, allowed, failures)
    if net.attempts:
        failures.append(f"connections attempted beyond loopback: {net.attempts}")
    assert not failures, "\n".join(failures)


async def _run_cases(surface: Surface, cases: Sequence[Case], trap: Listener,
                     allowed: Listener, failures: list[str]) -> None:
    for case in cases:
        ports = {"trap": trap.port, "allowed": allowed.port, "allowed_host": ALLOWED_HOST}
        url = case.url.format(**ports)
        if case.redirect_to is not None:
            location = case.redirect_to.format(**ports)
            allowed.reply = _response(302, {"location": location})
        egress = egress_for(case.allow, case.dns)
        before = trap.connections
        try:
            await surface(url, egress)
        except EgressBlocked as exc:
            assert exc.code == "egress_blocked" and exc.kind == "egress"
        except AtorError as exc:
            failures.append(f"{case.name} ({url}): {type(exc).__name__} {exc.code}: {exc}")
        except Exception as exc:  # reported, not swallowed: the case fails with its cause
            failures.append(f"{case.name} ({url}): {type(exc).__name__}: {exc}")
        else:
            failures.append(f"{case.name} ({url}): not refused")
        if trap.connections != before:
            failures.append(f"{case.name} ({url}): the trap saw a connection")
        resolver = egress.guard.resolver
        assert isinstance(resolver, StaticResolver)
        if case.lookups is not None and len(resolver.lookups) != case.lookups:
            failures.append(f"{case.name}: {len(resolver.lookups)} DNS lookups, "
                            f"wanted {case.lookups}")
        if case.redirect_to is not None and not allowed.requests:
            failures.append(f"{case.name}: the allowlisted host was never asked")
        allowed.requests.clear()


async def assert_pins_first_answer(surface: Surface) -> None:
    """A name that resolves to an allowlisted address first and to the trap afterwards: the
    request reaches the first address, the trap sees nothing, one lookup happens."""
    reply = _response(404, {"content-type": "application/json"}, b"{}")
    allowed = await Listener(reply).start(ALLOWED_HOST)
    # The trap listens on the same port at the address the second lookup would answer, so a
    # guard that resolved again before connecting would land there.
    trap = await Listener(reply).start("127.0.0.1", allowed.port)
    try:
        egress = egress_for((ALLOWED_HOST,),
                            {"rebind.test": [[ALLOWED_HOST], ["127.0.0.1"]]})
        with LoopbackOnly().active() as net, contextlib.suppress(AtorError):
            await surface(f"http://rebind.test:{allowed.port}/", egress)  # a 404 may raise
        assert not net.attempts
        resolver = egress.guard.resolver
        assert isinstance(resolver, StaticResolver)
        assert resolver.lookups == ["rebind.test"]
        assert allowed.connections >= 1 and trap.connections == 0
        assert b"host: rebind.test" in allowed.requests[0].lower()
    finally:
        await trap.aclose()
        await allowed.aclose()
