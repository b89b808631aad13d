"""No secret in clear outside the secrets store."""

from __future__ import annotations

import base64
import json
import os

import pytest
import sqlalchemy as sa

from ator.errors import SecretError, ValidationFailed
from ator.security.crypto import MasterKey
from ator.security.redact import REDACTED, redact
from ator.store.schema import secrets, setups, turns
from ator.store.scope import Scope
from ator.testing import AnthropicWireFake, Reply


def test_ciphertext_is_bound_to_its_org_and_name() -> None:
    key = MasterKey(os.urandom(32))
    nonce, blob = key.encrypt("sk-live-123", context="org-a/anthropic")
    assert b"sk-live-123" not in blob
    assert key.decrypt(nonce, blob, context="org-a/anthropic") == "sk-live-123"
    with pytest.raises(SecretError):
        key.decrypt(nonce, blob, context="org-b/anthropic")
    with pytest.raises(SecretError):
        MasterKey(os.urandom(32)).decrypt(nonce, blob, context="org-a/anthropic")


def test_redaction_keeps_references_and_hides_values() -> None:
    data = {"api_key": "secret:anthropic", "auth_token": "abc", "nested": [{"password": "p"}],
            "header": "Bearer xyz", "model": "m"}
    assert redact(data) == {"api_key": "secret:anthropic", "auth_token": REDACTED,
                            "nested": [{"password": REDACTED}], "header": REDACTED, "model": "m"}


async def test_setups_refuse_clear_credentials(make_ator) -> None:
    async with make_ator() as ator:
        scope = Scope((await ator.create_org("o")).id)
        with pytest.raises(ValidationFailed) as err:
            await ator.create_setup(scope, name="x", provider="anthropic", model="m",
                                    config={"api_key": "sk-ant-123"})
        assert err.value.code == "secret_in_config"


async def test_a_referenced_secret_is_used_but_never_stored_or_snapshotted(make_ator) -> None:
    value = "sk-ant-test-" + base64.b16encode(os.urandom(8)).decode()
    wire_fake = AnthropicWireFake([Reply(text="hello from the wire")])
    async with wire_fake as wire, make_ator(egress_allow="127.0.0.1") as ator:
        org = await ator.create_org("o")
        scope = Scope(org.id)
        await ator.put_secret(scope, "anthropic", value)
        setup = await ator.create_setup(
            scope, name="claude", provider="anthropic", model="claude-haiku-4-5",
            config={"api_key": "secret:anthropic", "base_url": wire.base_url},
        )
        thread = await ator.create_thread(scope, setup.id)
        result = await ator.ask(scope, thread.id, "hi", timeout=30)
        assert result.text == "hello from the wire"
        headers = wire.requests[0].headers
        # The SDK sends the key as x-api-key or (2.x) as a bearer token.
        assert value in (headers.get("x-api-key"), headers.get("authorization", "")[7:])
        stored = await ator.db.read(sa.select(secrets))
        snapshot = [r.config_snapshot for r in await ator.db.read(
            sa.select(turns.c.config_snapshot))]
        config = [r.config for r in await ator.db.read(sa.select(setups.c.config))]
        assert all(value.encode() not in bytes(row.ciphertext) for row in stored)
        assert value not in json.dumps(snapshot) and value not in json.dumps(config)
        # The reference itself stays visible: it names the secret without revealing it.
        ours = [s for s in snapshot if s.get("setup", {}).get("id") == str(setup.id)]
        assert [s["setup"]["config"]["api_key"] for s in ours] == ["secret:anthropic"]
