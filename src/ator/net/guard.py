"""The egress rule: which destinations an outbound request may reach (layer: net; imports
errors, settings, net.addresses, net.resolver).

`EgressGuard.admit` resolves a URL's host once, refuses it when any address it resolved to
is loopback, private, link-local, CGNAT, multicast, reserved or unspecified (unless the
operator allowlisted the host or the address), requires https unless the destination is
allowlisted, and returns the validated addresses. The transports pin a connection to exactly
those addresses (`pinned`): nothing resolves the name a second time, so DNS rebinding cannot
swap the address between the check and the connection.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from ator.errors import ConfigError, EgressBlocked
from ator.net.addresses import IPAddress, embedded_ipv4, loopback_name, parse_ip, refusal
from ator.net.resolver import Resolver, SystemResolver
from ator.settings import Settings

__all__ = [
    "CREDENTIAL_HEADERS",
    "Destination",
    "EgressGuard",
    "EgressPolicy",
    "egress_refusal",
    "origin",
    "pinned",
    "pinned_addresses",
]

#: Dropped from a redirected request whose origin differs from the one it was sent to.
CREDENTIAL_HEADERS: Final = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"}
)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """The operator's egress rule (built from Settings, immutable).

    `allow_hosts` are exact host names (case-insensitive, no trailing dot); a name listed here
    may resolve anywhere. `allow_networks` are addresses/CIDRs that may be reached whatever
    name led there. `allow_origins` are exact (scheme, host, port) triples: the endpoints the
    operator configured in the environment (ATOR_*_BASE_URL), allowed only on the clients
    built for them (`Egress.for_endpoint`), never on a tenant's. An allowlisted destination
    may use plain http; any other needs https."""

    allow_hosts: frozenset[str] = frozenset()
    allow_networks: tuple[Network, ...] = ()
    allow_origins: frozenset[tuple[str, str, int]] = frozenset()
    connect_timeout: float = 10.0
    read_timeout: float = 600.0
    max_response_bytes: int = 64 * 1024 * 1024
    max_redirects: int = 5

    @classmethod
    def from_settings(cls, settings: Settings) -> EgressPolicy:
        hosts, networks = parse_allowlist(settings.egress_allow)
        return cls(
            allow_hosts=hosts,
            allow_networks=networks,
            connect_timeout=settings.egress_connect_timeout,
            read_timeout=settings.egress_read_timeout,
            max_response_bytes=settings.egress_max_response_bytes,
            max_redirects=settings.egress_max_redirects,
        )

    def allows_host(self, host: str) -> bool:
        return _normal(host) in self.allow_hosts

    def allows_origin(self, scheme: str, host: str, port: int) -> bool:
        return (scheme, _normal(host), port) in self.allow_origins

    def allows_ip(self, ip: IPAddress) -> bool:
        candidates: list[IPAddress] = [ip]
        if isinstance(ip, ipaddress.IPv6Address) and (inner := embedded_ipv4(ip)) is not None:
            candidates.append(inner)
        return any(c in net for c in candidates for net in self.allow_networks
                   if c.version == net.version)


_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_LOOPBACK: Final = (ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1"))


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a URL, the port made explicit; ConfigError when malformed."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ConfigError(f"not a valid URL: {url!r}") from exc
    if parts.scheme not in _DEFAULT_PORTS or not host:
        raise ConfigError(f"not an http(s) URL with a host: {url!r}")
    return parts.scheme, _normal(host), port or _DEFAULT_PORTS[parts.scheme]


def parse_allowlist(entries: Iterable[str]) -> tuple[frozenset[str], tuple[Network, ...]]:
    """Split `ATOR_EGRESS_ALLOW` entries into host names and networks. An entry that reads as
    an address (any inet_aton spelling) or a CIDR is a network; anything else is a name."""
    hosts: set[str] = set()
    networks: list[Network] = []
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        if "/" in entry:
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError as exc:
                raise ConfigError(f"ATOR_EGRESS_ALLOW: bad network {entry!r}: {exc}") from exc
            continue
        ip = parse_ip(entry)
        if ip is not None:
            networks.append(ipaddress.ip_network(ip))
        else:
            hosts.add(_normal(entry))
    return frozenset(hosts), tuple(networks)


@dataclass(frozen=True, slots=True)
class Destination:
    """A host the guard admitted: connect only to `addresses` (validated, in order)."""

    host: str
    port: int
    addresses: tuple[str, ...]
    allowlisted: bool = field(default=False)


class EgressGuard:
    """Admits or refuses destinations under one policy, resolving through one resolver."""

    def __init__(self, policy: EgressPolicy, resolver: Resolver | None = None) -> None:
        self.policy = policy
        self.resolver: Resolver = resolver or SystemResolver()

    def check_url(self, url: str) -> None:
        """Judge what can be judged without DNS, when a URL is accepted (e.g. a setup's
        base_url): the scheme, a host that is an address in any spelling (`0177.0.0.1`,
        which httpx would otherwise reject as malformed rather than refuse) or a name for this
        machine (`localhost`, `app.localhost`). The transport
        still admits every request. Raises EgressBlocked, or ConfigError for a malformed URL."""
        try:
            parts = urlsplit(url)
            host = parts.hostname or ""
        except ValueError as exc:
            raise ConfigError(f"not a valid URL: {url!r}") from exc
        if parts.scheme not in ("http", "https"):
            raise EgressBlocked(host or url, f"scheme {parts.scheme!r} is not http or https")
        if not host:
            raise ConfigError(f"URL has no host: {url!r}")
        ip = parse_ip(host)
        allowed = self.policy.allows_host(host) or (ip is not None and self.policy.allows_ip(ip))
        if ip is not None and not allowed and (why := refusal(ip)) is not None:
            raise EgressBlocked(host, f"address {ip} is {why}; not in ATOR_EGRESS_ALLOW")
        if ip is None and not allowed and loopback_name(host) and not any(
                self.policy.allows_ip(a) for a in _LOOPBACK):  # admit judges what it resolves
            raise EgressBlocked(host, f"{host} names this machine (loopback); "
                                      "not in ATOR_EGRESS_ALLOW")

    async def admit(self, scheme: str, host: str, port: int) -> Destination:
        """Resolve `host` once and check every address. Raises EgressBlocked naming the host
        and the rule; OSError when the name does not resolve (a connection failure, not a
        refusal)."""
        name = _normal(host)
        if scheme not in ("http", "https"):
            raise EgressBlocked(host, f"scheme {scheme!r} is not http or https")
        name_allowed = (self.policy.allows_host(name)
                        or self.policy.allows_origin(scheme, name, port))
        literal = parse_ip(name)
        if literal is not None:
            addresses = [literal]
        else:
            answer = await self.resolver.resolve(name, port)
            if not answer:
                raise OSError(f"{host}: name resolved to no address")
            addresses = []
            for text in answer:
                ip = parse_ip(text)
                if ip is None:  # a resolver answers addresses; anything else is refused
                    raise EgressBlocked(host, f"resolver answered {text!r}, not an address")
                addresses.append(ip)
        # Every address must pass, not just the first: the connection may fall back to any.
        for ip in addresses:
            if name_allowed or self.policy.allows_ip(ip):
                continue
            why = refusal(ip)
            if why is not None:
                where = "" if literal is not None else f" (resolved from {name})"
                raise EgressBlocked(host, f"address {ip} is {why}{where}; not in ATOR_EGRESS_ALLOW")
        allowlisted = name_allowed or all(self.policy.allows_ip(ip) for ip in addresses)
        if scheme != "https" and not allowlisted:
            raise EgressBlocked(host, "https required for a destination not in ATOR_EGRESS_ALLOW")
        return Destination(name, port, tuple(str(ip) for ip in addresses), allowlisted)


# The addresses each (host, port) of the request in flight was admitted with. A contextvar
# because the connection pool opens connections inside the task that sends the request, and
# the network backend only learns the host and port.
_PINS: ContextVar[Mapping[tuple[str, int], Destination] | None] = ContextVar(
    "ator_egress_pins", default=None
)


@contextmanager
def pinned(destination: Destination) -> Iterator[None]:
    """Within this block, connections to the destination go to its validated addresses."""
    key = (destination.host, destination.port)
    token = _PINS.set({**(_PINS.get() or {}), key: destination})
    try:
        yield
    finally:
        _PINS.reset(token)


def pinned_addresses(host: str, port: int) -> tuple[str, ...]:
    """The validated addresses for a connection the pool is opening. Raises EgressBlocked when
    the guard did not admit this host (fail closed: never resolve here)."""
    destination = (_PINS.get() or {}).get((_normal(host), port))
    if destination is None:
        raise EgressBlocked(host, "connection attempted without passing the egress guard")
    return destination.addresses


def egress_refusal(exc: BaseException) -> EgressBlocked | None:
    """A fresh EgressBlocked when the guard's refusal caused `exc` (SDKs wrap whatever their
    transport raises in their own connection error), else None. For mapping at a boundary:
    `raise egress_refusal(exc) from exc` keeps a refusal typed instead of "network"."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, EgressBlocked):
            return EgressBlocked(cause.host, cause.rule)
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _normal(host: str) -> str:
    text = host.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return text.removesuffix(".")
