"""A setup's provider config: the typed model, the credential rule, the operator's policy
(providers/config.py), the tool policy (tools/policy.py) and redaction by the same exact rule
(security/redact.py). Pure functions: no database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ator.errors import Forbidden, ValidationFailed
from ator.providers.builtin import BUILTIN
from ator.providers.config import (
    AnthropicConfig,
    ConfigPolicy,
    CustomConfig,
    ProviderConfig,
    ScriptedConfig,
)
from ator.providers.config import parse_provider_config as parse_with_model
from ator.security.redact import REDACTED, is_secret_key, redact, restore_redacted
from ator.settings import Settings
from ator.tools.policy import parse_tool_policy


def parse_provider_config(provider: str, config: dict[str, Any] | None,
                          policy: ConfigPolicy | None = None) -> ProviderConfig:
    """A config checked against the model the built-in factory of `provider` registers
    (`CustomConfig` for a name no built-in has)."""
    models = {f.name: f.config for f in BUILTIN}
    return parse_with_model(models.get(provider, CustomConfig), config, policy)


def refused(provider: str, config: dict[str, Any], policy: ConfigPolicy | None = None
            ) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as err:
        parse_provider_config(provider, config, policy)
    return err.value


CLEAR_CREDENTIALS: dict[str, tuple[str, dict[str, Any], list[str | int]]] = {
    "clear api_key": ("anthropic", {"api_key": "sk-ant-1"}, ["config", "api_key"]),
    "api_key in an object": ("anthropic", {"api_key": {"v": "sk"}}, ["config", "api_key"]),
    "auth_token as a number": ("openai", {"auth_token": 12345}, ["config", "auth_token"]),
    "api_key as a list": ("openai", {"api_key": ["secret:A"]}, ["config", "api_key"]),
    "password nested in a custom config": (
        "custom", {"db": {"password": "hunter2"}}, ["config", "db", "password"]),
    "client_secret, any case": ("custom", {"Client_Secret": "x"}, ["config", "Client_Secret"]),
    "x-api-key key": ("custom", {"x-api-key": "abc"}, ["config", "x-api-key"]),
    "Cookie header": ("anthropic", {"headers": {"Cookie": "a=b"}},
                      ["config", "headers", "Cookie"]),
    "Authorization header": ("openai", {"headers": {"Authorization": "Bearer x"}},
                             ["config", "headers", "Authorization"]),
    "*-Key header": ("openai", {"headers": {"X-Goog-Api-Key": "k"}},
                     ["config", "headers", "X-Goog-Api-Key"]),
    "*-Token header holding a reference": (
        "openai", {"headers": {"X-Auth-Token": "secret:T"}},
        ["config", "headers", "X-Auth-Token"]),
    "userinfo in base_url": ("anthropic", {"base_url": "https://user:pass@example.com/v1"},
                             ["config", "base_url"]),
    "userinfo in any URL": ("scripted", {"script": [{"text": "https://u:p@h.example/"}]},
                            ["config", "script", 0, "text"]),
    "token in a scripted tool input": (
        "scripted", {"script": [{"tool_calls": [{"name": "t", "input": {"token": "abc"}}]}]},
        ["config", "script", 0, "tool_calls", 0, "input", "token"]),
}


@pytest.mark.parametrize("case", list(CLEAR_CREDENTIALS))
def test_clear_credentials_are_refused_with_their_path(case: str) -> None:
    provider, config, loc = CLEAR_CREDENTIALS[case]
    err = refused(provider, config)
    assert err.code == "secret_in_config"
    assert err.errors[0]["loc"] == [str(p) for p in loc]
    assert err.status == 422


def test_keys_that_merely_contain_credential_words_are_plain_keys() -> None:
    config = {"caps": {"max_output_tokens": 100, "max_turn_tokens": 1000},
              "author": "ann", "tokens_per_min": 5, "secretary": "bob", "keyboard": "us",
              "api_key_hint": "see the wiki"}
    parsed = parse_provider_config("custom", config)
    assert parsed.caps == {"max_output_tokens": 100, "max_turn_tokens": 1000}
    assert redact(config) == config
    for key in ("max_output_tokens", "author", "tokens_per_min", "caps", "secretary"):
        assert not is_secret_key(key), key
    for key in ("api_key", "API-KEY", "auth_token", "Authorization", "cookie", "x-api-key",
                "X-Custom-Token", "client_secret", "private_key", "refresh_token"):
        assert is_secret_key(key), key


def test_a_full_anthropic_config_is_accepted_and_typed() -> None:
    parsed = parse_provider_config("anthropic", {
        "api_key": "secret:anthropic", "base_url": "https://proxy.example.com:8443/v1",
        "headers": {"anthropic-beta": "x", "X-Trace": "1"}, "timeout": 30,
        "prompt_cache": False, "caps": {"max_steps": 3},
    })
    assert isinstance(parsed, AnthropicConfig)
    assert parsed.timeout == 30.0 and parsed.prompt_cache is False
    assert parsed.headers == {"anthropic-beta": "x", "X-Trace": "1"}


INVALID: dict[str, tuple[str, dict[str, Any], list[str], str]] = {
    "unknown key": ("scripted", {"note": "x"}, ["config", "note"], "invalid_config"),
    "script for anthropic": ("anthropic", {"script": []}, ["config", "script"],
                             "invalid_config"),
    "timeout as a string": ("openai", {"timeout": "10"}, ["config", "timeout"],
                            "invalid_config"),
    "timeout zero": ("openai", {"timeout": 0}, ["config", "timeout"], "invalid_config"),
    "timeout over the ceiling": ("openai", {"timeout": 601}, ["config", "timeout"],
                                 "invalid_config"),
    "prompt_cache as a string": ("anthropic", {"prompt_cache": "false"},
                                 ["config", "prompt_cache"], "invalid_config"),
    "malformed reference": ("anthropic", {"api_key": "secret:has space"},
                            ["config", "api_key"], "invalid_config"),
    "empty api_key": ("anthropic", {"api_key": ""}, ["config", "api_key"], "invalid_config"),
    "ftp base_url": ("openai", {"base_url": "ftp://example.com"}, ["config", "base_url"],
                     "invalid_config"),
    "base_url without host": ("openai", {"base_url": "https:///v1"}, ["config", "base_url"],
                              "invalid_config"),
    "base_url with a bad port": ("openai", {"base_url": "https://h.example:99999/"},
                                 ["config", "base_url"], "invalid_config"),
    "long base_url": ("openai", {"base_url": "https://h.example/" + "a" * 3000},
                      ["config", "base_url"], "invalid_config"),
    "headers not an object": ("openai", {"headers": ["a"]}, ["config", "headers"],
                              "invalid_config"),
    "header value with CRLF": ("openai", {"headers": {"X-A": "a\r\nHost: evil"}},
                               ["config", "headers", "X-A"], "invalid_config"),
    "header name not a token": ("openai", {"headers": {"X A": "1"}},
                                ["config", "headers", "X A", "[key]"], "invalid_config"),
    "too many headers": ("openai", {"headers": {f"X-H{i}": "1" for i in range(33)}},
                         ["config", "headers"], "invalid_config"),
    "Host header": ("openai", {"headers": {"Host": "internal"}}, ["config", "headers", "Host"],
                    "forbidden_header"),
    "Metadata-Flavor header": ("anthropic", {"headers": {"Metadata-Flavor": "Google"}},
                               ["config", "headers", "Metadata-Flavor"], "forbidden_header"),
    "X-Forwarded-For header": ("anthropic", {"headers": {"x-forwarded-for": "1.2.3.4"}},
                               ["config", "headers", "x-forwarded-for"], "forbidden_header"),
    "Proxy-* header": ("anthropic", {"headers": {"Proxy-Connection": "x"}},
                       ["config", "headers", "Proxy-Connection"], "forbidden_header"),
    "Transfer-Encoding header": ("anthropic", {"headers": {"Transfer-Encoding": "chunked"}},
                                 ["config", "headers", "Transfer-Encoding"],
                                 "forbidden_header"),
    "caps not an object": ("scripted", {"caps": [1]}, ["config", "caps"], "invalid_config"),
    "script step with an unknown field": ("scripted", {"script": [{"txet": "hi"}]},
                                          ["config", "script", "0", "txet"], "invalid_config"),
    "script step with a negative delay": ("scripted", {"script": [{"delay": -1}]},
                                          ["config", "script", "0", "delay"], "invalid_config"),
    "model_path with no models dir": ("local", {"model_path": "/etc/passwd"},
                                      ["config", "model_path"], "model_path_not_allowed"),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_values_are_refused_with_their_path(case: str) -> None:
    provider, config, loc, code = INVALID[case]
    err = refused(provider, config)
    assert err.code == code
    assert err.errors[0]["loc"] == loc
    assert ".".join(loc[:2]) in err.message


def test_unknown_key_says_so() -> None:
    err = refused("anthropic", {"base_ur1": "https://x.example"})
    assert err.errors[0]["msg"] == "unknown key for this provider"


def test_tenant_endpoints_switched_off_refuses_base_url_and_headers() -> None:
    policy = ConfigPolicy(tenant_endpoints=False)
    for config in ({"base_url": "https://x.example"}, {"headers": {"X-A": "1"}}):
        with pytest.raises(Forbidden) as err:
            parse_provider_config("anthropic", config, policy)
        assert err.value.code == "tenant_endpoints_disabled" and err.value.status == 403
    # Credentials by reference and timeouts are not endpoints.
    parse_provider_config("anthropic", {"api_key": "secret:k", "timeout": 5}, policy)


def test_the_policy_comes_from_settings(tmp_path: Path) -> None:
    settings = Settings(tenant_endpoints=False, max_provider_timeout=30,
                        local_models_dir=tmp_path, database_url="postgresql://x/y")
    policy = ConfigPolicy.from_settings(settings)
    assert policy == ConfigPolicy(tenant_endpoints=False, max_timeout=30,
                                  local_models_dir=tmp_path)
    assert refused("openai", {"timeout": 31}, policy).errors[0]["loc"] == ["config", "timeout"]
    parse_provider_config("openai", {"timeout": 30}, policy)


def test_model_path_only_inside_the_operators_models_dir(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "m.gguf").write_bytes(b"x")
    (tmp_path / "outside.gguf").write_bytes(b"x")
    (models / "link.gguf").symlink_to(tmp_path / "outside.gguf")
    policy = ConfigPolicy(local_models_dir=models)
    parse_provider_config("local", {"model_path": str(models / "m.gguf")}, policy)
    for bad in ("m.gguf", str(models / ".." / "outside.gguf"), str(tmp_path / "outside.gguf"),
                str(models / "link.gguf"), str(models / "notes.txt")):
        assert refused("local", {"model_path": bad}, policy).code == "model_path_not_allowed"


def test_scripted_config_is_typed_and_round_trips_into_the_provider() -> None:
    from ator.providers.scripted import ScriptedProvider

    config = {"script": [{"tool_calls": [{"name": "calculator", "input": {"e": "1"}}]},
                         {"text": "done", "usage": {"input_tokens": 3}}],
              "repeat_last": True}
    parsed = parse_provider_config("scripted", config)
    assert isinstance(parsed, ScriptedConfig) and parsed.script is not None
    assert len(parsed.script) == 2
    ScriptedProvider.from_config(config)  # what passes the model, the provider can play


def test_custom_providers_keep_their_own_keys_under_the_same_rules() -> None:
    parsed = parse_provider_config("mine", {"temperature": 0.1, "caps": {"max_steps": 2}})
    assert parsed.model_extra == {"temperature": 0.1}
    assert refused("mine", {"prompt_cache": 1}).code == "invalid_config"


def test_redaction_follows_the_exact_rule() -> None:
    config = {
        "api_key": "secret:anthropic", "auth_token": {"v": "sk"}, "token": 12345,
        "caps": {"max_output_tokens": 10}, "author": "ann",
        "headers": {"X-Trace": "1", "X-Api-Key": "k"}, "none": None,
        "base_url": "https://u:p@h.example/v1", "text": "sk-live-abc", "ok": "Bearer-less",
    }
    assert redact(config) == {
        "api_key": "secret:anthropic", "auth_token": REDACTED, "token": REDACTED,
        "caps": {"max_output_tokens": 10}, "author": "ann",
        "headers": {"X-Trace": "1", "X-Api-Key": REDACTED}, "none": None,
        "base_url": f"https://{REDACTED}@h.example/v1", "text": REDACTED, "ok": "Bearer-less",
    }


def test_restore_redacted_puts_back_what_redaction_hid() -> None:
    stored = {"script": [{"text": "sk-looks-secret"}, {"text": "plain"}],
              "base_url": "https://u:p@h.example/", "caps": {"max_steps": 3}}
    shown = redact(stored)
    assert shown["script"][0]["text"] == REDACTED
    assert restore_redacted(shown, stored) == stored
    # A placeholder with nothing behind it, or a changed neighbour, is taken as sent.
    edited = {**shown, "script": [{"text": REDACTED}, {"text": "new"}, {"text": REDACTED}]}
    assert restore_redacted(edited, stored)["script"] == [
        {"text": "sk-looks-secret"}, {"text": "new"}, {"text": REDACTED}]


def test_tool_policy_is_typed() -> None:
    assert parse_tool_policy({}).allow is None
    assert parse_tool_policy({"allow": [], "deny": ["x"]}).allow == []
    assert parse_tool_policy({"allow": ["srv__search", "calculator"]}).deny == []
    for bad, loc in (({"allow": "calculator"}, ["tool_policy", "allow"]),
                     ({"deny": [1]}, ["tool_policy", "deny", "0"]),
                     ({"allow": ["a b"]}, ["tool_policy", "allow", "0"]),
                     ({"alow": []}, ["tool_policy", "alow"]),
                     ({"allow": ["x"] * 1001}, ["tool_policy", "allow"])):
        with pytest.raises(ValidationFailed) as err:
            parse_tool_policy(bad)
        assert err.value.code == "invalid_tool_policy", bad
        assert err.value.errors[0]["loc"] == loc, bad
    with pytest.raises(ValidationFailed) as deep:
        parse_tool_policy({"allow": [[["x"]]]})
    assert deep.value.code == "too_deep"
