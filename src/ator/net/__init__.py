"""Egress: the only way out of the process (layer: net, bottom; imports errors, settings,
httpx, httpx2, httptools and the stdlib).

`Egress` builds every outbound HTTP client (httpx for plain HTTP, httpx2 for the provider and
MCP SDKs, whose connections `net.h1` makes) on a transport that resolves once, refuses
loopback/private/link-local/reserved addresses unless allowlisted (`ATOR_EGRESS_ALLOW`), pins
the validated address, re-checks every redirect and bounds time and size. A refusal is
`ator.errors.EgressBlocked`.
"""

from __future__ import annotations

from ator.net.addresses import parse_ip, refusal
from ator.net.egress import Egress
from ator.net.guard import (
    CREDENTIAL_HEADERS,
    Destination,
    EgressGuard,
    EgressPolicy,
    egress_refusal,
)
from ator.net.resolver import Resolver, StaticResolver, SystemResolver

__all__ = [
    "CREDENTIAL_HEADERS",
    "Destination",
    "Egress",
    "EgressGuard",
    "EgressPolicy",
    "Resolver",
    "StaticResolver",
    "SystemResolver",
    "egress_refusal",
    "parse_ip",
    "refusal",
]
