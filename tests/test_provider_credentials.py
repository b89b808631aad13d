"""A provider error never carries the credential that was sent (issue 17 S1, S2).

Self-hosted OpenAI-compatible servers have keys of no fixed shape and echo them ("account
<key> is not enabled"). The upstream here is the wire fake answering 403 with whatever bearer
token it received, so the test does not choose where the key appears: the server does. Both
credentials a call can carry are tried, the operator's process key and an org's plainly shaped
secret, and what reaches the tenant is read where a viewer reads it: the turn over the API,
the `turn_ended` event over the API, the turn row, and the server log."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from ator import Ator
from ator.errors import ProviderError
from ator.providers.anthropic import AnthropicProvider
from ator.providers.base import ModelRequest
from ator.providers.openai import OpenAIProvider
from ator.store.schema import turns
from ator.testing import AnthropicWireFake, HttpError, OpenAIWireFake
from ator.testing.wire import RecordedRequest
from tests.conftest import operator_client
from tests.test_api import _org_with_admin, auth

PROCESS_KEY = "opkey-" + uuid.uuid4().hex[:12]  # no vendor shape: only its value can match
ORG_SECRET = "hunter2hunter2-" + uuid.uuid4().hex[:8]  # a plainly shaped secret


def _echo(prefix: str = "account ", suffix: str = " is not enabled for this model"
          ) -> Any:
    """An upstream answering 403 with the credential it received inside its message."""

    def respond(request: RecordedRequest) -> HttpError:
        sent = request.headers.get("authorization", "")[len("Bearer "):] or \
            request.headers.get("x-api-key", "")
        return HttpError(403, f"{prefix}{sent}{suffix}", error_type="permission_error")

    return respond


@pytest.fixture
async def upstream() -> AsyncIterator[OpenAIWireFake]:
    async with OpenAIWireFake(responder=_echo(), strict=False) as fake:
        yield fake


@pytest.fixture
async def api(make_ator: Any, upstream: OpenAIWireFake
              ) -> AsyncIterator[tuple[httpx.AsyncClient, str, Ator]]:
    async with operator_client(make_ator, rate_limit_per_minute=0, egress_allow=("127.0.0.1",),
                               openai_api_key=PROCESS_KEY,
                               openai_base_url=upstream.base_url) as made:
        yield made


async def _ended(client: httpx.AsyncClient, key: str, thread_id: str) -> dict[str, Any]:
    seq = 0
    for _ in range(60):
        page = (await client.get(f"/v1/threads/{thread_id}/events", headers=auth(key),
                                 params={"after_seq": seq, "wait": 30})).json()
        for event in (frame["data"] for frame in page["data"]):  # frames (engine.wire)
            if event["kind"] == "turn_ended":
                return dict(event)
        seq = page["last_seq"]
    raise AssertionError("the turn did not end")


async def _failed_turn(api: Any, config: dict[str, Any], secret: str | None
                       ) -> tuple[list[str], Ator]:
    """Run one turn that the upstream refuses; return everything a viewer can read of it."""
    client, operator, runtime = api
    admin = await _org_with_admin(client, operator, f"creds-{uuid.uuid4().hex[:6]}")
    viewer = (await client.post("/v1/api-keys", headers=auth(admin), json={
        "name": "v", "role": "viewer", "email": "viewer@x.example"})).json()["key"]
    if secret is not None:
        put = await client.put("/v1/secrets/llm", headers=auth(admin), json={"value": secret})
        assert put.status_code in (200, 201, 204), put.text
    setup = await client.post("/v1/setups", headers=auth(admin), json={
        "name": "s", "provider": "openai", "model": "gpt-4o-mini", "config": config})
    assert setup.status_code == 201, setup.text
    thread = (await client.post("/v1/threads", headers=auth(admin),
                                json={"setup_id": setup.json()["id"]})).json()
    sent = await client.post(f"/v1/threads/{thread['id']}/messages", headers=auth(admin),
                             json={"text": "hi"})
    assert sent.status_code in (200, 201, 202), sent.text
    event = await _ended(client, viewer, thread["id"])
    listed = (await client.get(f"/v1/threads/{thread['id']}/turns",
                               headers=auth(viewer))).json()["data"]
    one = (await client.get(f"/v1/turns/{listed[0]['id']}", headers=auth(viewer))).text
    rows = await runtime.db.read(sa.select(turns.c.error).where(
        turns.c.id == uuid.UUID(listed[0]["id"])))
    return [str(event), str(listed), one, str(rows[0].error)], runtime


async def test_the_process_key_echoed_by_the_upstream_reaches_no_tenant(
    api: Any, upstream: OpenAIWireFake, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ator")
    seen, _ = await _failed_turn(api, {}, None)
    # The upstream did get the process key, and did echo it.
    assert upstream.requests[0].headers["authorization"] == f"Bearer {PROCESS_KEY}"
    for text in seen:
        assert PROCESS_KEY not in text and PROCESS_KEY[6:14] not in text, text
    # What is left is still legible: status, type, the message around the key.
    assert "openai: 403 permission_error: account [redacted] is not enabled" in seen[3]
    assert PROCESS_KEY not in caplog.text


async def test_an_org_secret_echoed_by_its_endpoint_reaches_no_viewer(
    api: Any, upstream: OpenAIWireFake, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ator")
    config = {"base_url": upstream.base_url, "api_key": "secret:llm"}
    seen, _ = await _failed_turn(api, config, ORG_SECRET)
    assert upstream.requests[-1].headers["authorization"] == f"Bearer {ORG_SECRET}"
    for text in seen:
        assert ORG_SECRET not in text and "hunter2" not in text, text
    assert "account [redacted] is not enabled" in seen[3]
    assert ORG_SECRET not in caplog.text


REQUEST = ModelRequest(model="m", messages=[{"role": "user",
                                             "content": [{"type": "text", "text": "hi"}]}])


@pytest.mark.parametrize(("fake_cls", "provider_cls", "kwargs"), [
    pytest.param(OpenAIWireFake, OpenAIProvider, {"api_key": ORG_SECRET}, id="openai-key"),
    pytest.param(AnthropicWireFake, AnthropicProvider, {"api_key": ORG_SECRET},
                 id="anthropic-key"),
    pytest.param(AnthropicWireFake, AnthropicProvider, {"auth_token": ORG_SECRET},
                 id="anthropic-token"),
])
@pytest.mark.parametrize("where", ["whole", "cut by the length bound", "half of it"])
async def test_no_piece_of_the_sent_credential_survives(
    fake_cls: Any, provider_cls: Any, kwargs: dict[str, str], where: str
) -> None:
    """The credential is removed before the other rules run: a shape rule that takes only
    part of it, or the 300-character bound cutting through it, leaves nothing of it."""
    if where == "whole":
        responder = _echo()
    elif where == "cut by the length bound":
        responder = _echo(prefix="x" * 290 + " ")
    else:
        def responder(request: RecordedRequest) -> HttpError:
            return HttpError(403, f"key begins {ORG_SECRET[:9]}, see the docs")
    async with (
        fake_cls(responder=responder, strict=False) as fake,
        provider_cls(base_url=fake.base_url, **kwargs) as provider,
    ):
        with pytest.raises(ProviderError) as info:
            async for _ in provider.stream(REQUEST):
                pass
    message = info.value.message
    assert "hunter2h" not in message and ORG_SECRET[-8:] not in message, message
    assert message.startswith(f"{fake_cls.__name__[:-8].lower()}: 403 ")


async def test_user_info_in_the_operators_endpoint_is_a_credential_sent_too() -> None:
    """Found from outside: ATOR_OPENAI_BASE_URL=http://user:pass@proxy/v1 makes the HTTP
    client send Basic auth, and an upstream echoing its Authorization header showed the
    tenant that token. The user info counts among what was sent."""
    def respond(request: RecordedRequest) -> HttpError:
        return HttpError(403, f"bad credentials {request.headers.get('authorization')} "
                         "for proxy-user / proxy-pass-1234", error_type="permission_error")

    async with OpenAIWireFake(responder=respond, strict=False) as fake:
        url = f"http://proxy-user:proxy-pass-1234@127.0.0.1:{fake.port}/v1"
        async with OpenAIProvider(api_key="k", base_url=url) as provider:
            with pytest.raises(ProviderError) as info:
                async for _ in provider.stream(REQUEST):
                    pass
    sent = fake.requests[0].headers["authorization"]
    assert sent.startswith("Basic "), sent  # what the SDK's client really sent
    message = info.value.message
    for piece in (sent[6:], "proxy-pass-1234", "proxy-user"):
        assert piece not in message, message
