"""The one factory of outbound HTTP clients (layer: net; imports settings, net.guard,
net.resolver, net.*_transport, net.h1, httpx, httpx2).

Every client that leaves the process is built here, so every one carries the guard: the
provider and MCP SDKs get an `httpx2.AsyncClient` (`httpx2_client`) whose connections are made
by `net.h1`, plain HTTP (web fetch) an `httpx.AsyncClient` (`httpx_client`) on httpx's own
pinned pool. Tests inject a fake resolver (`Egress(policy,
resolver=...)`) and/or a fake inner transport (`transport=`), the way httpx injects one; the
guard still judges every request.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Mapping
from dataclasses import replace

import httpx
import httpx2

from ator.net import httpx2_transport, httpx_transport
from ator.net.guard import EgressGuard, EgressPolicy, origin
from ator.net.h1 import H1Transport
from ator.net.resolver import Resolver
from ator.settings import Settings

__all__ = ["Egress"]


class Egress:
    """Builds guarded clients under one policy and one resolver."""

    def __init__(self, policy: EgressPolicy, resolver: Resolver | None = None) -> None:
        self.guard = EgressGuard(policy, resolver)
        # One TLS context per stack, shared by every client: loading the trust store costs
        # about 0.7 MB per context, which per provider client was most of its memory.
        self._tls: ssl.SSLContext | None = None
        self._tls2: ssl.SSLContext | None = None

    @classmethod
    def from_settings(cls, settings: Settings, resolver: Resolver | None = None) -> Egress:
        return cls(EgressPolicy.from_settings(settings), resolver)

    @property
    def policy(self) -> EgressPolicy:
        return self.guard.policy

    def for_endpoint(self, url: str) -> Egress:
        """The same rule plus exactly `url`'s scheme, host and port: for the clients of an
        endpoint the operator configured (ATOR_*_BASE_URL), which may be on loopback or a
        private network because the operator said so. Nothing else gets the exception: a
        tenant's client to the same host is built on the plain rule."""
        policy = replace(self.policy, allow_origins=self.policy.allow_origins | {origin(url)})
        return Egress(policy, self.guard.resolver)

    def httpx_client(
        self,
        *,
        base_url: str = "",
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        secret_headers: Iterable[str] = (),
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> httpx.AsyncClient:
        """An httpx client whose every request passes the guard. `timeout` (seconds) is
        further capped by the policy; `transport` replaces the pinned pool (tests)."""
        if transport is None:
            if self._tls is None:
                self._tls = httpx.create_ssl_context(trust_env=False)
            transport = httpx_transport.pinned_http_transport(verify=self._tls)
        guarded = httpx_transport.GuardedTransport(
            self.guard, inner=transport, secret_headers=secret_headers
        )
        return httpx.AsyncClient(
            base_url=base_url, headers=dict(headers or {}), transport=guarded,
            timeout=self._timeout(timeout), trust_env=False, follow_redirects=False,
        )

    def httpx2_client(
        self,
        *,
        base_url: str = "",
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        secret_headers: Iterable[str] = (),
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> httpx2.AsyncClient:
        """The same for httpx2, the transport of the anthropic and openai SDKs."""
        if transport is None:
            if self._tls2 is None:
                self._tls2 = httpx2.create_ssl_context(trust_env=False)
            transport = H1Transport(verify=self._tls2)
        guarded = httpx2_transport.GuardedTransport(
            self.guard, inner=transport, secret_headers=secret_headers
        )
        t = self._timeout(timeout)
        return httpx2.AsyncClient(
            base_url=base_url, headers=dict(headers or {}), transport=guarded,
            timeout=httpx2.Timeout(t.read, connect=t.connect), trust_env=False,
            follow_redirects=False,
        )

    def _timeout(self, timeout: float | None) -> httpx.Timeout:
        p = self.policy
        read = p.read_timeout if timeout is None else min(timeout, p.read_timeout)
        return httpx.Timeout(read, connect=min(read, p.connect_timeout))
