"""The egress guard (net/) on every surface that exists, and the provider credential rule."""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest

import ator.net
from ator.errors import ConfigError, EgressBlocked, ProviderError
from ator.net import Egress, EgressPolicy, StaticResolver, parse_ip, refusal
from ator.net.guard import parse_allowlist
from ator.providers.base import ModelRequest, TextDelta
from ator.providers.openai import NO_API_KEY
from ator.providers.registry import ProviderRegistry
from ator.settings import Settings
from ator.testing import AnthropicWireFake, OpenAIWireFake, Reply
from tests.ssrf import (
    ALLOWED_HOST,
    Listener,
    LoopbackOnly,
    assert_pins_first_answer,
    assert_ssrf_refused,
    egress_for,
)

PROCESS_KEY = "sk-process-key-never-leaves"
REQUEST = ModelRequest(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=16)


async def _secret(name: str) -> str:
    return f"org-secret-{name}"


def _settings(**kw: Any) -> Settings:
    return Settings(anthropic_api_key=PROCESS_KEY, openai_api_key=PROCESS_KEY, **kw)


# --------------------------------------------------------------------------- addresses


@pytest.mark.parametrize(("host", "address", "why"), [
    ("2130706433", "127.0.0.1", "loopback"),
    ("0177.0.0.1", "127.0.0.1", "loopback"),
    ("0x7f000001", "127.0.0.1", "loopback"),
    ("0x7f.1", "127.0.0.1", "loopback"),
    ("127.1", "127.0.0.1", "loopback"),
    ("10.1", "10.0.0.1", "private"),
    ("[::1]", "::1", "loopback"),
    ("[::ffff:10.0.0.1]", "::ffff:a00:1", "private (embedded in IPv6)"),
    ("::127.0.0.1", "::7f00:1", "loopback (embedded in IPv6)"),
    ("64:ff9b::c0a8:1", "64:ff9b::c0a8:1", "private (embedded in IPv6)"),
    ("169.254.169.254", "169.254.169.254", "link-local"),
    ("100.127.255.255", "100.127.255.255", "cgnat"),
    ("0.0.0.0", "0.0.0.0", "unspecified"),
    ("[::]", "::", "unspecified"),
    ("239.1.1.1", "239.1.1.1", "multicast"),
    ("240.0.0.1", "240.0.0.1", "reserved"),
    ("8.8.8.8", "8.8.8.8", None),
    ("[2606:4700::1111]", "2606:4700::1111", None),
    ("64:ff9b::808:808", "64:ff9b::808:808", None),
])
def test_every_spelling_is_read_like_the_c_resolver(host: str, address: str,
                                                    why: str | None) -> None:
    ip = parse_ip(host)
    assert ip is not None and str(ip) == address
    assert refusal(ip) == why


@pytest.mark.parametrize("host", ["api.anthropic.com", "localhost", "1.2.3.4.5", "[zz::1]"])
def test_names_are_not_addresses(host: str) -> None:
    assert parse_ip(host) is None


def test_allowlist_takes_names_addresses_and_networks() -> None:
    hosts, nets = parse_allowlist(["LLM.internal.", "127.1", "10.0.0.0/8", "fd00::/8"])
    policy = EgressPolicy(allow_hosts=hosts, allow_networks=nets)
    assert policy.allows_host("llm.internal")
    assert all(policy.allows_ip(parse_ip(h)) for h in  # type: ignore[arg-type]
               ("127.0.0.1", "10.9.8.7", "::ffff:10.0.0.1", "fd00::5"))
    assert not policy.allows_ip(parse_ip("127.0.0.2"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        parse_allowlist(["10.0.0.0/99"])


def test_settings_read_the_allowlist_as_a_comma_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATOR_EGRESS_ALLOW", "127.0.0.1, llm.internal,10.0.0.0/8")
    policy = EgressPolicy.from_settings(Settings())
    assert policy.allow_hosts == {"llm.internal"} and len(policy.allow_networks) == 2


# --------------------------------------------------------------------------- the SSRF matrix


async def _httpx_surface(url: str, egress: Egress) -> None:
    egress.guard.check_url(url)  # what a surface does when it accepts a tenant's URL
    async with egress.httpx_client() as client:
        await client.get(url)


async def _httpx2_surface(url: str, egress: Egress) -> None:
    egress.guard.check_url(url)
    async with egress.httpx2_client() as client:
        await client.get(url)


def _provider_surface(name: str) -> Any:
    async def surface(url: str, egress: Egress) -> None:
        registry = ProviderRegistry(_settings(), egress=egress)
        try:
            provider = await registry.build(name, {"base_url": url, "api_key": "secret:k"},
                                            _secret)
            async for _ in provider.stream(REQUEST):
                pass
        finally:
            await registry.aclose()
    return surface


SURFACES = {
    "httpx": _httpx_surface,
    "httpx2": _httpx2_surface,
    "anthropic base_url": _provider_surface("anthropic"),
    "openai base_url": _provider_surface("openai"),
}


async def test_the_matrix_safety_net_stops_a_connection_beyond_loopback() -> None:
    original = socket.socket.connect
    with LoopbackOnly().active() as net:
        # Proven patched before trying, so a broken net can never let the connect through.
        assert socket.socket.connect is not original
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("192.0.2.1", 443)
    assert net.attempts == [("192.0.2.1", 443)] and socket.socket.connect is original


@pytest.mark.parametrize("surface", SURFACES)
async def test_ssrf_matrix_is_refused_before_connecting(surface: str) -> None:
    await assert_ssrf_refused(SURFACES[surface])


@pytest.mark.parametrize("surface", SURFACES)
async def test_one_lookup_and_the_validated_address_is_the_one_connected(surface: str) -> None:
    await assert_pins_first_answer(SURFACES[surface])


@pytest.mark.parametrize("name", ["anthropic", "openai"])
async def test_an_allowlisted_loopback_endpoint_works(name: str) -> None:
    fake_type = AnthropicWireFake if name == "anthropic" else OpenAIWireFake
    async with fake_type([Reply(text="through the guard")]) as fake:
        registry = ProviderRegistry(_settings(egress_allow="127.0.0.1"))
        try:
            provider = await registry.build(
                name, {"base_url": fake.base_url, "api_key": "secret:k"}, _secret)
            events = [e async for e in provider.stream(REQUEST)]
        finally:
            await registry.aclose()
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "through the guard"


# --------------------------------------------------------------------------- transport rules


async def _pair(first_reply: bytes) -> tuple[Listener, Listener]:
    return (await Listener(first_reply).start(ALLOWED_HOST),
            await Listener(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").start("127.0.0.4"))


@pytest.mark.parametrize("lib", ["httpx", "httpx2"])
async def test_credentials_are_dropped_when_a_redirect_changes_origin(lib: str) -> None:
    second = await Listener(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").start("127.0.0.4")
    first = await Listener(
        f"HTTP/1.1 307 X\r\nlocation: http://127.0.0.4:{second.port}/next\r\n"
        "content-length: 0\r\n\r\n".encode()).start(ALLOWED_HOST)
    egress = egress_for((ALLOWED_HOST, "127.0.0.4"), {})
    secret_headers = {"Authorization": "Bearer a", "x-api-key": "b", "api-key": "c",
                      "Cookie": "d=e", "X-Tenant-Token": "f", "X-Plain": "kept"}
    try:
        make = egress.httpx_client if lib == "httpx" else egress.httpx2_client
        async with make(headers=secret_headers, secret_headers=["x-tenant-token"]) as client:
            response = await client.post(f"http://{ALLOWED_HOST}:{first.port}/", content=b"{}")
        assert response.status_code == 200 and response.text == "ok"
        sent_first = first.requests[0].decode().lower()
        sent_second = second.requests[0].decode().lower()
        for name in ("authorization", "x-api-key", "api-key", "cookie", "x-tenant-token"):
            assert f"\r\n{name}:" in sent_first
            assert f"\r\n{name}:" not in sent_second, name
        assert "x-plain: kept" in sent_second and sent_second.startswith("post /next")
    finally:
        await first.aclose()
        await second.aclose()


async def test_a_same_origin_redirect_keeps_credentials_and_hops_are_capped() -> None:
    hop = await Listener(b"").start(ALLOWED_HOST)
    hop.reply = (f"HTTP/1.1 302 X\r\nlocation: http://{ALLOWED_HOST}:{hop.port}/again\r\n"
                 "content-length: 0\r\n\r\n").encode()
    egress = Egress(EgressPolicy(allow_networks=parse_allowlist([ALLOWED_HOST])[1],
                                 max_redirects=3))
    try:
        async with egress.httpx_client(headers={"x-api-key": "k"}) as client:
            with pytest.raises(EgressBlocked, match="more than 3 redirects"):
                await client.get(f"http://{ALLOWED_HOST}:{hop.port}/")
        assert len(hop.requests) == 4
        assert all(b"x-api-key: k" in r.lower() for r in hop.requests)
    finally:
        await hop.aclose()


@pytest.mark.parametrize("lib", ["httpx", "httpx2"])
async def test_the_response_body_is_bounded(lib: str) -> None:
    declared = await Listener(b"HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n" + b"x" * 5000
                              ).start(ALLOWED_HOST)
    streamed = await Listener(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + b"y" * 5000
                              ).start(ALLOWED_HOST)
    egress = Egress(EgressPolicy(allow_networks=parse_allowlist([ALLOWED_HOST])[1],
                                 max_response_bytes=1024))
    try:
        make = egress.httpx_client if lib == "httpx" else egress.httpx2_client
        async with make() as client:
            for server in (declared, streamed):
                with pytest.raises(EgressBlocked, match="larger than 1024 bytes"):
                    await client.get(f"http://{ALLOWED_HOST}:{server.port}/")
    finally:
        await declared.aclose()
        await streamed.aclose()


async def test_an_injected_host_header_is_refused() -> None:
    server = await Listener(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").start(ALLOWED_HOST)
    try:
        async with egress_for((ALLOWED_HOST,), {}).httpx_client(
            headers={"Host": "metadata.google.internal"}) as client:
            with pytest.raises(EgressBlocked, match="Host header"):
                await client.get(f"http://{ALLOWED_HOST}:{server.port}/")
        assert server.connections == 0
    finally:
        await server.aclose()


async def test_proxies_from_the_environment_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    trap = await Listener(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").start("127.0.0.1")
    server = await Listener(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").start(ALLOWED_HOST)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(var, f"http://127.0.0.1:{trap.port}")
    try:
        egress = egress_for((ALLOWED_HOST,), {})
        async with egress.httpx_client() as c1, egress.httpx2_client() as c2:
            for client in (c1, c2):
                assert (await client.get(f"http://{ALLOWED_HOST}:{server.port}/")).text == "ok"
        assert trap.connections == 0 and server.connections == 2
    finally:
        await trap.aclose()
        await server.aclose()


async def test_a_connection_the_guard_did_not_admit_is_refused() -> None:
    from ator.net.httpx_transport import PinnedBackend

    with pytest.raises(EgressBlocked, match="without passing the egress guard"):
        await PinnedBackend().connect_tcp("127.0.0.1", 9)


async def test_a_name_that_does_not_resolve_is_a_connection_error() -> None:
    async with egress_for((), {}).httpx_client() as client:
        with pytest.raises(httpx.ConnectError):
            await client.get("https://nowhere.test/")


async def test_the_timeouts_are_capped_by_the_policy() -> None:
    seen: list[dict[str, float]] = []

    def record(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.extensions["timeout"])
        return httpx2.Response(200)

    egress = Egress(EgressPolicy(connect_timeout=2.0, read_timeout=7.0),
                    StaticResolver({"api.example": ["93.184.216.34"]}))
    async with egress.httpx2_client(transport=httpx2.MockTransport(record)) as client:
        await client.get("https://api.example/", timeout=httpx2.Timeout(100.0))
    assert seen[0]["connect"] == 2.0 and seen[0]["read"] == 7.0


def test_the_httpx2_transport_is_the_httpx_one_renamed() -> None:
    net = Path(ator.net.__file__).parent

    def body(name: str) -> str:
        text = (net / name).read_text()
        return text[text.index('"""', 3) + 3:]

    renamed = re.sub(r"\bhttpcore\b", "httpcore2", body("httpx_transport.py"))
    renamed = re.sub(r"\bhttpx\b", "httpx2", renamed)
    assert renamed == body("httpx2_transport.py")


async def test_every_client_shares_one_tls_context() -> None:
    # A trust store per client was most of a provider client's memory (+240 MB for 300).
    egress = Egress(EgressPolicy())
    async with egress.httpx2_client() as c1, egress.httpx2_client() as c2, \
            egress.httpx_client() as c3, egress.httpx_client() as c4:
        inner = [c._transport._inner for c in (c1, c2, c3, c4)]  # type: ignore[attr-defined]
        assert inner[0]._ssl is inner[1]._ssl is not None
        assert inner[2]._pool._ssl_context is inner[3]._pool._ssl_context is not None


def test_net_exports_resolve() -> None:
    for name in ator.net.__all__:
        assert hasattr(ator.net, name), name


# --------------------------------------------------------------------------- credentials


async def test_a_tenant_base_url_without_credential_never_gets_the_process_key() -> None:
    registry = ProviderRegistry(_settings(egress_allow="127.0.0.1"))
    try:
        with pytest.raises(ConfigError, match="must name its own credential"):
            await registry.build("anthropic", {"base_url": "http://127.0.0.1:9"}, _secret)
        async with OpenAIWireFake([Reply(text="ok")]) as fake:
            provider = await registry.build("openai", {"base_url": fake.base_url}, _secret)
            [e async for e in provider.stream(REQUEST)]
        assert fake.requests[0].headers["authorization"] == f"Bearer {NO_API_KEY}"
    finally:
        await registry.aclose()


@pytest.mark.parametrize("name", ["anthropic", "openai"])
async def test_the_process_key_goes_to_the_process_endpoint_only(name: str) -> None:
    fake_type = AnthropicWireFake if name == "anthropic" else OpenAIWireFake
    async with fake_type([Reply(text="a")]) as process, fake_type([Reply(text="b")]) as tenant:
        registry = ProviderRegistry(_settings(
            egress_allow="127.0.0.1", anthropic_base_url=process.base_url,
            openai_base_url=process.base_url))
        try:
            for config in ({}, {"base_url": tenant.base_url, "api_key": "secret:own"}):
                provider = await registry.build(name, config, _secret)
                [e async for e in provider.stream(REQUEST)]
        finally:
            await registry.aclose()
    assert PROCESS_KEY in str(process.requests[0].headers)
    assert PROCESS_KEY not in str(tenant.requests[0].headers)
    assert "org-secret-own" in str(tenant.requests[0].headers)


async def test_tenant_endpoints_can_be_switched_off() -> None:
    registry = ProviderRegistry(_settings(tenant_endpoints=False))
    for config in ({"base_url": "https://llm.example", "api_key": "secret:k"},
                   {"headers": {"x-route": "a"}}):
        with pytest.raises(ConfigError, match="ATOR_TENANT_ENDPOINTS"):
            await registry.build("openai", config, _secret)
    assert await registry.build("openai", {}, _secret) is not None
    await registry.aclose()


# --------------------------------------------------------------------------- the client cache


async def test_the_cache_keys_on_every_client_argument_and_is_bounded() -> None:
    registry = ProviderRegistry(_settings(provider_cache_size=3))
    try:
        a = await registry.build("openai", {"timeout": 30}, _secret)
        b = await registry.build("openai", {"timeout": 0.001}, _secret)
        assert a is not b  # one org's tiny timeout never reaches another org's turns
        assert a is await registry.build("openai", {"timeout": 30.0}, _secret)
        c = await registry.build("openai", {"headers": {"x-a": "1"}}, _secret)
        d = await registry.build("openai", {"api_key": "secret:other"}, _secret)
        assert len({id(p) for p in (a, b, c, d)}) == 4
        for i in range(20):
            await registry.build("openai", {"headers": {"x-n": str(i)}}, _secret)
        assert registry.cached == 3
        for evicted in (a, b, c, d):  # idle when evicted: closed at once
            assert evicted._entry.provider._client.is_closed()  # type: ignore[attr-defined]
    finally:
        await registry.aclose()


async def test_an_evicted_client_closes_once_idle_and_not_before() -> None:
    async with OpenAIWireFake([Reply(text="one two three four")]) as fake:
        registry = ProviderRegistry(_settings(egress_allow="127.0.0.1", provider_cache_size=1))
        busy = await registry.build("openai", {"base_url": fake.base_url}, _secret)
        stream = busy.stream(REQUEST)
        first = await anext(stream)
        # Evict it while its stream runs: the stream must still finish.
        await registry.build("openai", {"base_url": fake.base_url, "timeout": 5}, _secret)
        rest = [e async for e in stream]
        assert first is not None and rest
        client = busy._entry.provider._client  # type: ignore[attr-defined]
        assert client.is_closed()
        await registry.aclose()
        assert registry.cached == 0


async def test_a_leased_provider_stays_open_until_the_lease_ends() -> None:
    registry = ProviderRegistry(_settings(provider_cache_size=1))
    async with registry.lease("openai", {}, _secret) as leased:
        await registry.build("openai", {"timeout": 5}, _secret)  # evicts the leased one
        client = leased._entry.provider._client  # type: ignore[attr-defined]
        assert registry.cached == 1 and not client.is_closed()
    assert client.is_closed()
    await registry.aclose()


async def test_a_refusal_inside_the_sdk_stays_typed_and_is_not_retried() -> None:
    # A name passes the build-time check; the refusal happens in the transport, under the SDK.
    registry = ProviderRegistry(
        _settings(), egress=egress_for((), {"metadata.test": ["169.254.169.254"]}))
    provider = await registry.build(
        "anthropic", {"base_url": "https://metadata.test", "api_key": "secret:k"}, _secret)
    with pytest.raises(EgressBlocked) as info:
        async for _ in provider.stream(REQUEST):
            pass
    assert not isinstance(info.value, ProviderError) and not info.value.retryable
    assert "169.254.169.254" in info.value.message
    await registry.aclose()
