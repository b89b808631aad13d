"""Building the provider a setup names (layer: providers; imports providers.*, errors).

Credentials come from the setup's config as secret references ("secret:NAME", resolved by the
engine through the org's encrypted secrets) or from process settings. Built clients are
cached by (provider, base URL, credential fingerprint) so HTTP connections are reused across
turns; a cache entry never appears in a snapshot or a log.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ator.errors import ConfigError
from ator.providers.base import Provider
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
    def __init__(self, settings: Settings, overrides: Mapping[str, Provider] | None = None):
        self._settings = settings
        self._overrides = dict(overrides or {})
        self._cache: dict[tuple[str, ...], Provider] = {}

    def register(self, name: str, provider: Provider) -> None:
        """Make `name` resolve to this instance (tests, embedders with custom models)."""
        self._overrides[name] = provider

    async def aclose(self) -> None:
        """Close the HTTP clients of every provider this registry built."""
        cached = list(self._cache.values())
        self._cache.clear()
        for provider in cached:
            aclose = getattr(provider, "aclose", None)
            if aclose is not None:
                await aclose()

    def known(self) -> list[str]:
        return sorted({*KNOWN_PROVIDERS, *self._overrides})

    async def build(
        self, name: str, config: Mapping[str, Any], resolve: SecretResolver
    ) -> Provider:
        if name in self._overrides:
            return self._overrides[name]
        if name == "scripted":
            key = ("scripted", json.dumps(config.get("script"), sort_keys=True),
                   str(config.get("repeat_last")))
            if key not in self._cache:
                from ator.providers.scripted import ScriptedProvider

                self._cache[key] = ScriptedProvider.from_config(dict(config))
            return self._cache[key]
        if name == "local":
            key = ("local", str(config.get("model_path", "")), "")
            if key not in self._cache:
                from ator.providers.local import LocalProvider

                self._cache[key] = LocalProvider(model_path=config.get("model_path"))
            return self._cache[key]
        if name in ("anthropic", "openai"):
            return await self._http_provider(name, config, resolve)
        raise ConfigError(f"unknown provider {name!r}; known: {', '.join(self.known())}")

    async def _http_provider(
        self, name: str, config: Mapping[str, Any], resolve: SecretResolver
    ) -> Provider:
        s = self._settings
        default_key = s.anthropic_api_key if name == "anthropic" else s.openai_api_key
        default_url = s.anthropic_base_url if name == "anthropic" else s.openai_base_url
        api_key = await _credential(config.get("api_key"), resolve)
        auth_token = await _credential(config.get("auth_token"), resolve)
        # The process-wide key is a fallback only when the setup names no credential.
        if api_key is None and auth_token is None and default_key is not None:
            api_key = default_key.get_secret_value()
        base_url = config.get("base_url") or default_url
        headers = config.get("headers") or {}
        if not isinstance(headers, dict):
            raise ConfigError("config.headers must be an object")
        if api_key is None and auth_token is None and name == "anthropic":
            raise ConfigError("no Anthropic credential: set ATOR_ANTHROPIC_API_KEY or "
                              "config.api_key = 'secret:NAME'")
        fingerprint = hashlib.sha256(f"{api_key}|{auth_token}".encode()).hexdigest()
        key = (name, str(base_url), fingerprint, json.dumps(headers, sort_keys=True))
        if key not in self._cache:
            timeout = float(config.get("timeout", 600.0))
            if name == "anthropic":
                from ator.providers.anthropic import AnthropicProvider

                self._cache[key] = AnthropicProvider(
                    api_key=api_key, auth_token=auth_token, base_url=base_url,
                    default_headers=headers, timeout=timeout,
                )
            else:
                from ator.providers.openai import OpenAIProvider

                self._cache[key] = OpenAIProvider(
                    api_key=api_key or "not-needed", base_url=base_url,
                    default_headers=headers, timeout=timeout,
                )
        return self._cache[key]


async def _credential(value: Any, resolve: SecretResolver) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value.startswith("secret:"):
        return await resolve(value[len("secret:") :])
    raise ConfigError("credentials in a setup must be secret references ('secret:NAME')")
