"""Provider errors reach tenants sanitized: status, the provider's error type and a bounded,
cleaned message - never the upstream body. Through the real SDKs against the wire fakes."""

from __future__ import annotations

import logging
from typing import Any

import httpx2
import pytest

from ator.errors import AtorError, ProviderError
from ator.providers.anthropic import AnthropicProvider
from ator.providers.base import ModelRequest
from ator.providers.openai import OpenAIProvider
from ator.providers.upstream import MAX_MESSAGE_CHARS, describe, error_fields, sanitize
from ator.testing import AnthropicWireFake, HttpError, OpenAIWireFake, Reply, StreamError

REQUEST = ModelRequest(
    model="claude-test-model",
    messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
)
VENDORS = [
    pytest.param(AnthropicWireFake, AnthropicProvider, "anthropic", id="anthropic"),
    pytest.param(OpenAIWireFake, OpenAIProvider, "openai", id="openai"),
]
KEY = "sk-proj-Q7fG2kLm9XzP4vB8nR1tY6wE3aS5dF0h"


async def failure(fake_cls: Any, provider_cls: Any, item: Any) -> ProviderError:
    async with (
        fake_cls([item]) as fake,
        provider_cls(api_key="k", base_url=fake.base_url) as provider,
    ):
        with pytest.raises(ProviderError) as info:
            async for _ in provider.stream(REQUEST):
                pass
    return info.value


def assert_clean(message: str) -> None:
    assert len(message) <= MAX_MESSAGE_CHARS + 40  # vendor, status and type in front
    assert all(ch.isprintable() for ch in message), repr(message)


# --------------------------------------------------------------------------- through the SDKs


@pytest.mark.parametrize(("fake_cls", "provider_cls", "vendor"), VENDORS)
async def test_status_type_and_message_reach_the_tenant(
    fake_cls: Any, provider_cls: Any, vendor: str
) -> None:
    item = HttpError(404, "model: claude-nope was not found", error_type="not_found_error")
    exc = await failure(fake_cls, provider_cls, item)
    assert exc.message == f"{vendor}: 404 not_found_error: model: claude-nope was not found"
    assert (exc.kind, exc.status_code) == ("not_found", 404)


@pytest.mark.parametrize(("fake_cls", "provider_cls", "vendor"), VENDORS)
async def test_a_key_in_the_upstream_message_is_redacted(
    fake_cls: Any, provider_cls: Any, vendor: str
) -> None:
    item = HttpError(401, f"Incorrect API key provided: {KEY}. Find yours at the dashboard.")
    exc = await failure(fake_cls, provider_cls, item)
    assert KEY not in exc.message and "Q7fG2kLm9" not in exc.message
    assert exc.message.startswith(f"{vendor}: 401 ")
    assert "Incorrect API key provided: [redacted]" in exc.message
    assert exc.kind == "auth"


@pytest.mark.parametrize(("fake_cls", "provider_cls", "vendor"), VENDORS)
async def test_a_body_that_is_not_a_json_error_is_never_echoed(
    fake_cls: Any, provider_cls: Any, vendor: str
) -> None:
    page = "<html><body>metadata-server: iam/role=admin secret=hunter2</body></html>"
    exc = await failure(fake_cls, provider_cls, HttpError(502, body=page))
    assert exc.message == f"{vendor}: 502 error"
    assert (exc.kind, exc.retryable, exc.status_code) == ("server", True, 502)


@pytest.mark.parametrize(("fake_cls", "provider_cls", "vendor"), VENDORS)
async def test_only_the_error_fields_of_a_json_body_are_used_and_bounded(
    fake_cls: Any, provider_cls: Any, vendor: str
) -> None:
    body = {
        "error": {
            "type": "invalid_request_error",
            "message": "bad\x1b[31m input\r\nInjected: header\x00" + "x" * 5000,
        },
        "debug": {"upstream": "10.1.2.3:8080", "env": "PROD_DB_PASSWORD=letmein"},
    }
    exc = await failure(fake_cls, provider_cls, HttpError(400, body=body))
    assert_clean(exc.message)
    assert exc.message.startswith(f"{vendor}: 400 invalid_request_error: bad [31m input Injected")
    assert exc.message.endswith("…")
    assert "10.1.2.3" not in exc.message and "letmein" not in exc.message


@pytest.mark.parametrize(("fake_cls", "provider_cls", "vendor"), VENDORS)
async def test_an_error_type_that_is_not_an_identifier_is_not_repeated(
    fake_cls: Any, provider_cls: Any, vendor: str
) -> None:
    body = {"error": {"type": "<script>alert(1)</script>", "message": "nope"}}
    exc = await failure(fake_cls, provider_cls, HttpError(403, body=body))
    assert exc.message == f"{vendor}: 403 error: nope"


@pytest.mark.parametrize(("fake_cls", "provider_cls", "vendor"), VENDORS)
async def test_an_error_inside_the_stream_is_sanitized_too(
    fake_cls: Any, provider_cls: Any, vendor: str
) -> None:
    item = StreamError(
        "overloaded_error", f"Overloaded\n(upstream said Authorization: Bearer {KEY})",
        reply=Reply(text="partial"), after_events=2,
    )
    exc = await failure(fake_cls, provider_cls, item)
    assert KEY not in exc.message
    assert_clean(exc.message)
    assert "overloaded_error: Overloaded (upstream said Authorization: [redacted]" in exc.message
    assert exc.retryable


async def test_ollama_style_string_error_is_read_as_the_message() -> None:
    body = {"error": "model 'llama9' not found, try pulling it first"}
    exc = await failure(OpenAIWireFake, OpenAIProvider, HttpError(404, body=body))
    assert exc.message == "openai: 404 error: model 'llama9' not found, try pulling it first"


async def test_the_raw_body_stays_in_the_debug_log_only(caplog: pytest.LogCaptureFixture) -> None:
    page = "<html>upstream detail 7f3a</html>"
    with caplog.at_level(logging.DEBUG, logger="ator.providers"):
        exc = await failure(AnthropicWireFake, AnthropicProvider, HttpError(500, body=page))
    assert "7f3a" not in exc.message
    records = [r for r in caplog.records if r.name == "ator.providers"]
    assert records and all(r.levelno == logging.DEBUG for r in records)
    assert any("upstream detail 7f3a" in r.getMessage() for r in records)


async def test_connection_errors_do_not_repeat_addresses() -> None:
    fake = AnthropicWireFake()
    await fake.start()
    base_url = fake.base_url
    await fake.stop()
    async with AnthropicProvider(api_key="k", base_url=base_url) as provider:
        with pytest.raises(ProviderError) as info:
            async for _ in provider.stream(REQUEST):
                pass
    assert info.value.message == "anthropic: connection failed"
    assert str(fake.port) not in info.value.message


# --------------------------------------------------------------------------- the rules (pure)


@pytest.mark.parametrize(
    ("text", "leak"),
    [
        ("key sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123 rejected", "abcdefghijkl"),
        ("Authorization: Bearer abc.def-ghi_jkl012345", "abc.def-ghi"),
        ("token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig", "eyJhbGci"),
        ("see https://admin:s3cr3tpass@internal.example/x", "s3cr3tpass"),
        ("api_key=abcd1234efgh and more", "abcd1234efgh"),
        ('{"x-api-key": "k-123456789"}', "k-123456789"),
        ("AWS AKIAIOSFODNN7EXAMPLE denied", "AKIAIOSFODNN7EXAMPLE"),
        ("hash 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "9f86d081884c"),
        ("google AIzaSyA-1234567890abcdefghijklmnopqrs", "AIzaSyA"),
        ("password: hunter22 please", "hunter22"),
    ],
)
def test_sanitize_redacts_credential_looking_strings(text: str, leak: str) -> None:
    clean = sanitize(text)
    assert leak not in clean
    assert "[redacted]" in clean


def test_sanitize_keeps_ordinary_messages_intact() -> None:
    text = "messages.0.content: Field required (max_tokens: 1024, model claude-sonnet-4-5)"
    assert sanitize(text) == text


def test_sanitize_bounds_and_strips_controls() -> None:
    clean = sanitize("a\u202eb\u0007c\n\nd" + "y" * 1000)
    assert clean.startswith("a b c d")
    assert len(clean) == MAX_MESSAGE_CHARS and clean.endswith("…")


def test_error_fields_reads_only_the_envelope() -> None:
    assert error_fields({"error": {"type": "rate_limit_error", "message": "slow"}}) == (
        "rate_limit_error",
        "slow",
    )
    assert error_fields({"type": "x", "message": "m"}) == ("x", "m")
    assert error_fields({"error": {"type": 3, "message": ["m"]}}) == (None, None)
    assert error_fields("<html>") == (None, None)
    assert error_fields(None) == (None, None)


def test_describe_without_message_or_type() -> None:
    assert describe("openai", 500, None, None) == "openai: 500 error"
    assert describe("openai", None, "server_error", "") == "openai: server_error"


class _Refusing(httpx2.AsyncBaseTransport):
    """A transport that refuses every request with one of our own errors, as a guard does."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        raise AtorError(
            "egress to 10.0.0.1 refused: private address", kind="egress", code="egress_blocked"
        )


@pytest.mark.parametrize(("provider_cls", "vendor"), [
    (AnthropicProvider, "anthropic"), (OpenAIProvider, "openai")])
async def test_our_own_error_under_the_sdk_wrapper_keeps_its_words_and_code(
    provider_cls: Any, vendor: str
) -> None:
    async with (
        httpx2.AsyncClient(transport=_Refusing()) as client,
        provider_cls(api_key="k", base_url="https://api.example", http_client=client) as provider,
    ):
        with pytest.raises(ProviderError) as info:
            async for _ in provider.stream(REQUEST):
                pass
    assert info.value.message == f"{vendor}: egress to 10.0.0.1 refused: private address"
    assert (info.value.code, info.value.kind, info.value.retryable) == (
        "egress_blocked", "network", False)
