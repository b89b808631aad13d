"""What an address is, and whether egress may reach it (layer: net; imports stdlib only).

A host is read the way the C resolver would read it before any judgement: `2130706433`,
`0177.0.0.1`, `0x7f000001`, `127.1` and `10.1` are all IPv4 literals (inet_aton semantics),
so a spelling never smuggles a private address past the check. IPv6 addresses that embed an
IPv4 one (mapped, compatible, NAT64, 6to4, Teredo) are judged by the address they embed.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Final

__all__ = ["IPAddress", "embedded_ipv4", "loopback_name", "parse_ip", "refusal"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_CGNAT: Final = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE: Final = ipaddress.IPv6Network("::/96")


# Names that mean this machine whatever DNS says (RFC 6761 `localhost` and its subdomains;
# the spellings /etc/hosts files ship): judged without a lookup, like an address literal.
_LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost.localdomain", "ip6-localhost",
                                    "ip6-loopback"})


def loopback_name(host: str) -> bool:
    """Whether `host` is a name for this machine (`localhost`, `x.localhost`, …)."""
    name = host.strip().lower().removesuffix(".")
    return name in _LOOPBACK_NAMES or name.endswith(".localhost")


def parse_ip(host: str) -> IPAddress | None:
    """The IP address `host` spells (brackets and a trailing dot allowed), else None.

    IPv4 follows inet_aton: decimal, octal and hex parts, and the 1-, 2- and 3-part short
    forms, exactly what getaddrinfo would connect to."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text.split("%", 1)[0])  # a zone id names no host
        except ValueError:
            return None
    text = text.removesuffix(".")
    # inet_aton also accepts trailing junk after whitespace; a URL host holds none, and a
    # string with any is not a literal we want to interpret.
    if not text or any(c.isspace() for c in text):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        return None


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, compatible, NAT64, 6to4, Teredo)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64 or (ip in _IPV4_COMPATIBLE and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


def refusal(ip: IPAddress) -> str | None:
    """Why egress may not reach `ip` (e.g. "loopback"), or None for a public address."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = embedded_ipv4(ip)
        if inner is not None:
            why = refusal(inner)
            return None if why is None and ip in _NAT64 else (
                f"{why} (embedded in IPv6)" if why else "IPv4 embedded in IPv6"
            )
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "cgnat"
    if ip.is_private:
        # ipaddress counts reserved and documentation ranges as private too; name the
        # classic ones plainly, the rest as reserved.
        return "private" if _is_rfc1918_or_ula(ip) else "reserved"
    if ip.is_reserved or not ip.is_global:
        return "reserved"
    return None


def _is_rfc1918_or_ula(ip: IPAddress) -> bool:
    if isinstance(ip, ipaddress.IPv4Address):
        return any(ip in ipaddress.IPv4Network(n)
                   for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
    return ip in ipaddress.IPv6Network("fc00::/7")
