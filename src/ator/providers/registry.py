"""Building the provider a setup names (layer: providers; imports providers.*, net, errors,
settings).

Every HTTP provider is built on a client from the egress factory (`net.Egress`), so its
connections pass the SSRF guard. Credentials come from the setup's config as secret references
("secret:NAME", resolved by the engine through the org's encrypted secrets) or, under one rule,
from process settings: the process-wide key (ATOR_*_API_KEY) goes only to the process-wide
endpoint (ATOR_*_BASE_URL or the SDK default). A setup that names its own `base_url` brings its
own credential or none (an OpenAI-compatible server without auth) and never inherits the
process key. With ATOR_TENANT_ENDPOINTS=false, a setup's `base_url` and `headers` are refused.

Built providers are cached (bounded LRU, `ProviderCache`) under a fingerprint of every argument
the client is built with, so two setups share a client only when it would be identical; a
cache key never appears in a snapshot or a log.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from ator.errors import ConfigError
from ator.net import Egress
from ator.providers.base import Provider
from ator.providers.cache import CachedProvider, ProviderCache
from ator.providers.preload import ensure_loaded
from ator.settings import Settings

__all__ = [
    "DEFAULT_ANTHROPIC_MODEL",
    "DEFAULT_OPENAI_MODEL",
    "KNOWN_PROVIDERS",
    "ProviderRegistry",
    "default_provider",
]

KNOWN_PROVIDERS = ("anthropic", "openai", "scripted", "local")

# What a new user gets when a hosted key is present: fast, cheap, priced in cost/prices.py.
DEFAULT_ANTHROPIC_MODEL = "claude-haiku-4-5"
DEFAULT_OPENAI_MODEL = "gpt-4o-mini"

SecretResolver = Callable[[str], Awaitable[str]]


def default_provider(settings: Settings) -> tuple[str, str]:
    """The (provider, model) a zero-configuration command uses.

    Anthropic if ATOR_ANTHROPIC_API_KEY is set, else OpenAI if ATOR_OPENAI_API_KEY is set,
    else the packaged local model when llama-cpp-python and the model file are installed,
    else the scripted provider (which echoes, and always works)."""
    if settings.anthropic_api_key is not None:
        return "anthropic", DEFAULT_ANTHROPIC_MODEL
    if settings.openai_api_key is not None:
        return "openai", DEFAULT_OPENAI_MODEL
    from ator.providers.local import DEFAULT_LOCAL_MODEL, LocalProvider

    try:
        LocalProvider()  # checks llama-cpp-python and the model file; loads nothing yet
    except ConfigError:
        return "scripted", "scripted"
    return "local", DEFAULT_LOCAL_MODEL


class ProviderRegistry:
    def __init__(
        self,
        settings: Settings,
        overrides: Mapping[str, Provider] | None = None,
        *,
        egress: Egress | None = None,
    ) -> None:
        self._settings = settings
        self._overrides = dict(overrides or {})
        self._egress = egress or Egress.from_settings(settings)
        # The endpoints the operator configured are reachable wherever they are (a local
        # vLLM on 127.0.0.1): their clients get exactly that origin allowed, nothing more.
        self._operator = {name: self._egress.for_endpoint(url) for name, url in
                          (("anthropic", settings.anthropic_base_url),
                           ("openai", settings.openai_base_url)) if url}
        self._cache = ProviderCache(settings.provider_cache_size)

    def register(self, name: str, provider: Provider) -> None:
        """Make `name` resolve to this instance (tests, embedders with custom models)."""
        self._overrides[name] = provider

    async def aclose(self) -> None:
        """Close the HTTP clients of every provider this registry built (a client still
        streaming closes when its stream ends)."""
        await self._cache.aclose()

    @property
    def cached(self) -> int:
        """How many built providers the cache holds now."""
        return len(self._cache)

    def check_endpoint(self, url: str) -> None:
        """Judge a tenant endpoint when it is written (scheme, a literal address in any
        spelling); the transport still admits every request. Raises EgressBlocked."""
        self._egress.guard.check_url(url)

    def known(self) -> list[str]:
        return sorted({*KNOWN_PROVIDERS, *self._overrides})

    @contextlib.asynccontextmanager
    async def lease(
        self, name: str, config: Mapping[str, Any], resolve: SecretResolver
    ) -> AsyncIterator[Provider]:
        """`build`, holding the provider's client open until the block ends even if the cache
        evicts it meanwhile (`build` alone protects only while a stream runs)."""
        provider = await self.build(name, config, resolve)
        if not isinstance(provider, CachedProvider):  # an override: not the cache's to close
            yield provider
            return
        async with provider.held() as held:
            yield held

    async def build(
        self, name: str, config: Mapping[str, Any], resolve: SecretResolver
    ) -> Provider:
        """The provider for a setup's (provider, config). Raises ConfigError for an unknown
        provider, a refused endpoint or a missing credential; SecretError when a referenced
        secret cannot be read."""
        if name in self._overrides:
            return self._overrides[name]
        if name == "scripted":
            key = ("scripted", json.dumps(config.get("script"), sort_keys=True),
                   str(config.get("repeat_last")))
            if (cached := self._cache.get(key)) is not None:
                return cached
            from ator.providers.scripted import ScriptedProvider

            return await self._cache.put(key, ScriptedProvider.from_config(dict(config)), [])
        if name == "local":
            key = ("local", str(config.get("model_path", "")), "")
            if (cached := self._cache.get(key)) is not None:
                return cached
            from ator.providers.local import LocalProvider

            local = LocalProvider(model_path=config.get("model_path"))
            return await self._cache.put(key, local, _closers(local))
        if name in ("anthropic", "openai"):
            return await self._http_provider(name, config, resolve)
        raise ConfigError(f"unknown provider {name!r}; known: {', '.join(self.known())}")

    async def _http_provider(
        self, name: str, config: Mapping[str, Any], resolve: SecretResolver
    ) -> Provider:
        kwargs = await self._client_arguments(name, config, resolve)
        # The process endpoint (no base_url of the setup's own) goes through the operator's
        # egress; a tenant's base_url naming the same URL does not, so the key tells them apart.
        egress = self._egress if config.get("base_url") else self._operator.get(name,
                                                                                self._egress)
        # Every argument the client is built with shapes it, so every one is in the key
        # (credentials only as a hash of the whole).
        key = (name, hashlib.sha256(json.dumps(kwargs, sort_keys=True).encode()).hexdigest(),
               egress is self._egress)
        if (cached := self._cache.get(key)) is not None:
            return cached
        http_client = egress.httpx2_client(
            timeout=kwargs["timeout"], secret_headers=kwargs["default_headers"]
        )
        provider: Any
        await ensure_loaded(name)  # the SDK imports in a worker thread, never on the loop
        if name == "anthropic":
            from ator.providers.anthropic import AnthropicProvider

            provider = await asyncio.to_thread(AnthropicProvider, **kwargs,
                                               http_client=http_client)
        else:
            from ator.providers.openai import OpenAIProvider

            provider = await asyncio.to_thread(OpenAIProvider, **kwargs, http_client=http_client)
        return await self._cache.put(key, provider, [*_closers(provider), http_client.aclose])

    async def _client_arguments(
        self, name: str, config: Mapping[str, Any], resolve: SecretResolver
    ) -> dict[str, Any]:
        s = self._settings
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
        api_key = await _credential(config.get("api_key"), resolve)
        auth_token = await _credential(config.get("auth_token"), resolve)
        named = api_key is not None or auth_token is not None
        if tenant_url:
            self._egress.guard.check_url(tenant_url)
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


def _closers(provider: object) -> list[Callable[[], Awaitable[None]]]:
    aclose = getattr(provider, "aclose", None)
    return [aclose] if aclose is not None else []


async def _credential(value: Any, resolve: SecretResolver) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value.startswith("secret:"):
        return await resolve(value[len("secret:") :])
    raise ConfigError("credentials in a setup must be secret references ('secret:NAME')")
