"""The providers ator ships, registered as factories like any other (layer: providers; imports
providers.factory, providers.config, errors, and the adapter modules lazily, by name).

Every HTTP provider is built on a client from the egress factory (`net.Egress`), so its
connections pass the SSRF guard. Credentials come from the setup's config as secret references
("secret:NAME", resolved by the engine through the org's encrypted secrets) or, under one rule,
from process settings: the process-wide key (ATOR_*_API_KEY) goes only to the process-wide
endpoint (ATOR_*_BASE_URL or the SDK default). A setup that names its own `base_url` brings its
own credential or none (an OpenAI-compatible server without auth) and never inherits the
process key. With ATOR_TENANT_ENDPOINTS=false, a setup's `base_url` and `headers` are refused.

Adapters are imported only when a provider is built (the SDKs are heavy); `preload` names what
the engine imports off the loop when it starts.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from ator.errors import ConfigError
from ator.providers.cli.factories import CLI_FACTORIES
from ator.providers.config import AnthropicConfig, LocalConfig, OpenAIConfig, ScriptedConfig
from ator.providers.factory import BuildContext, Built, ProviderFactory, Recipe, SecretResolver
from ator.providers.local import DEFAULT_LOCAL_MODEL  # a light module: llama loads lazily

__all__ = ["BUILTIN", "DEFAULT_ANTHROPIC_MODEL", "DEFAULT_OPENAI_MODEL"]

# What a new user gets when a hosted key is present: fast, cheap, priced in cost/prices.py.
DEFAULT_ANTHROPIC_MODEL = "claude-haiku-4-5"
DEFAULT_OPENAI_MODEL = "gpt-4o-mini"

_ANTHROPIC_MODULES = ("anthropic", "anthropic.resources.messages", "ator.providers.anthropic")
_OPENAI_MODULES = (
    "openai",
    "openai.resources.chat.chat",
    "openai.resources.chat.completions.completions",
    "openai.lib.streaming.chat",
    "ator.providers.openai",
)


async def _scripted(config: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    async def build() -> Built:
        from ator.providers.scripted import ScriptedProvider

        return Built(ScriptedProvider.from_config(dict(config)))

    return Recipe(("scripted", json.dumps(config.get("script"), sort_keys=True),
                   str(config.get("repeat_last"))), build)


async def _local(config: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    async def build() -> Built:
        from ator.providers.local import LocalProvider

        return Built.of(LocalProvider(model_path=config.get("model_path")))

    return Recipe(("local", str(config.get("model_path", "")), ""), build)


async def _anthropic(config: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    return await _http("anthropic", config, ctx)


async def _openai(config: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    return await _http("openai", config, ctx)


async def _http(name: str, config: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    kwargs = await _client_arguments(name, config, ctx)
    # Every argument the client is built with shapes it, so every one is in the key
    # (credentials only as a hash of the whole).
    # The endpoint the operator configured is reachable wherever it is (a local vLLM on
    # 127.0.0.1): the process endpoint's client gets exactly that origin allowed, nothing
    # more; a tenant's base_url naming the same URL does not, so the key tells them apart.
    operator = not config.get("base_url") and kwargs["base_url"] is not None
    key = (name, hashlib.sha256(json.dumps(kwargs, sort_keys=True).encode()).hexdigest(),
           str(operator))

    async def build() -> Built:
        egress = ctx.egress.for_endpoint(kwargs["base_url"]) if operator else ctx.egress
        http_client = egress.httpx2_client(
            timeout=kwargs["timeout"], secret_headers=kwargs["default_headers"]
        )
        provider: Any  # the SDK is loaded by now (the registry awaits the preload first)
        if name == "anthropic":
            from ator.providers.anthropic import AnthropicProvider

            provider = await asyncio.to_thread(AnthropicProvider, **kwargs,
                                               http_client=http_client)
        else:
            from ator.providers.openai import OpenAIProvider

            provider = await asyncio.to_thread(OpenAIProvider, **kwargs, http_client=http_client)
        return Built.of(provider, http_client.aclose)

    return Recipe(key, build)


async def _client_arguments(
    name: str, config: Mapping[str, Any], ctx: BuildContext
) -> dict[str, Any]:
    s = ctx.settings
    process_key = s.anthropic_api_key if name == "anthropic" else s.openai_api_key
    process_url = s.anthropic_base_url if name == "anthropic" else s.openai_base_url
    tenant_url = config.get("base_url")
    headers = config.get("headers") or {}
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise ConfigError("config.headers must be an object of strings")
    if (tenant_url or headers) and not s.tenant_endpoints:
        raise ConfigError("this server does not allow a setup's own base_url or headers "
                          "(ATOR_TENANT_ENDPOINTS=false)")
    if tenant_url is not None and not isinstance(tenant_url, str):
        raise ConfigError("config.base_url must be a string")
    api_key = await _credential(config.get("api_key"), ctx.resolve)
    auth_token = await _credential(config.get("auth_token"), ctx.resolve)
    named = api_key is not None or auth_token is not None
    if tenant_url:
        ctx.egress.guard.check_url(tenant_url)
        # The credential rule: the process key never follows a setup to its own endpoint.
        if not named and name == "anthropic":
            raise ConfigError(
                "a setup with its own base_url must name its own credential "
                "(config.api_key = 'secret:NAME'); the server's key is only sent to the "
                "server's own endpoint"
            )
        base_url: str | None = tenant_url
    else:
        if not named and process_key is not None:
            api_key = process_key.get_secret_value()
        base_url = process_url
    if api_key is None and auth_token is None and name == "anthropic":
        raise ConfigError("no Anthropic credential: set ATOR_ANTHROPIC_API_KEY or "
                          "config.api_key = 'secret:NAME'")
    try:
        timeout = float(config.get("timeout", 600.0))
    except (TypeError, ValueError) as exc:
        raise ConfigError("config.timeout must be a number of seconds") from exc
    if not timeout > 0:
        raise ConfigError("config.timeout must be positive")
    kwargs: dict[str, Any] = {"api_key": api_key, "base_url": base_url,
                              "default_headers": dict(headers), "timeout": timeout}
    if name == "anthropic":
        kwargs["auth_token"] = auth_token
    return kwargs


async def _credential(value: Any, resolve: SecretResolver) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value.startswith("secret:"):
        return await resolve(value[len("secret:") :])
    raise ConfigError("credentials in a setup must be secret references ('secret:NAME')")


#: The providers every registry starts with.
BUILTIN: Final[tuple[ProviderFactory, ...]] = (
    ProviderFactory("anthropic", _anthropic, AnthropicConfig, _ANTHROPIC_MODULES,
                    DEFAULT_ANTHROPIC_MODEL),
    ProviderFactory("openai", _openai, OpenAIConfig, _OPENAI_MODULES, DEFAULT_OPENAI_MODEL),
    ProviderFactory("local", _local, LocalConfig, default_model=DEFAULT_LOCAL_MODEL),
    ProviderFactory("scripted", _scripted, ScriptedConfig, default_model="scripted"),
    *CLI_FACTORIES,
)
