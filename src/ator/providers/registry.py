"""Building the provider a setup names, from the factories registered by name (layer:
providers; imports providers.*, net, errors, settings).

A registry starts with the built-in factories (`providers.builtin`: anthropic, openai, local,
scripted) and takes more with `register_factory`, the same way: a provider is a name, a
config model, a way to build it and what to preload (`providers.factory`). Nothing in this
module names a provider.

Built providers are cached (bounded LRU, `ProviderCache`) under the factory's fingerprint of
every argument the client is built with, so two setups share a client only when it would be
identical; a cache key never appears in a snapshot or a log.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Hashable, Iterable, Mapping
from typing import Any

from ator.errors import ConfigError, ValidationFailed
from ator.net import Egress
from ator.providers.base import Provider
from ator.providers.builtin import BUILTIN, DEFAULT_ANTHROPIC_MODEL, DEFAULT_OPENAI_MODEL
from ator.providers.cache import CachedProvider, ProviderCache
from ator.providers.config import (
    ConfigPolicy,
    CustomConfig,
    ProviderConfig,
    parse_provider_config,
)
from ator.providers.factory import BuildContext, ProviderFactory, Recipe, SecretResolver
from ator.providers.preload import ensure_loaded, preload
from ator.settings import Settings

__all__ = [
    "DEFAULT_ANTHROPIC_MODEL",
    "DEFAULT_OPENAI_MODEL",
    "ProviderRegistry",
    "default_provider",
]


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
        factories: Iterable[ProviderFactory] = (),
    ) -> None:
        self._settings = settings
        self._egress = egress or Egress.from_settings(settings)
        self._cache = ProviderCache(settings.provider_cache_size)
        # One build per key at a time: the turns that miss the cache together (a burst on a
        # fresh process) wait for the same client instead of each building one (an SSL
        # context, a connection pool) that the next `put` retires at once.
        self._building: dict[Hashable, asyncio.Future[Provider]] = {}
        self._factories: dict[str, ProviderFactory] = {}
        for factory in (*BUILTIN, *factories):
            self.register_factory(factory)
        for name, provider in (overrides or {}).items():
            self.register(name, provider)

    def register_factory(self, factory: ProviderFactory) -> None:
        """Make `factory.name` a provider setups may name (replacing one of that name: an
        embedder may swap a built-in)."""
        self._factories[factory.name] = factory

    def register(self, name: str, provider: Provider) -> None:
        """Make `name` resolve to this instance (tests, embedders with custom models); a
        setup's config is still checked against the model of the provider it replaces."""
        replaced = self._factories.get(name)
        config = replaced.config if replaced is not None else CustomConfig
        self.register_factory(ProviderFactory.instance(name, provider, config=config))

    def factory(self, name: str) -> ProviderFactory:
        """The factory of `name`; ConfigError naming the known ones when there is none."""
        found = self._factories.get(name)
        if found is None:
            raise ConfigError(f"unknown provider {name!r}; known: {', '.join(self.known())}")
        return found

    def parse_config(
        self, name: str, config: Mapping[str, Any] | None, policy: ConfigPolicy
    ) -> ProviderConfig:
        """A setup's config checked against provider `name`'s model and the operator's
        policy (`providers.config`). Raises ValidationFailed (422 `unknown_provider`, or the
        config's own codes) or Forbidden."""
        found = self._factories.get(name)
        if found is None:
            raise ValidationFailed(
                f"unknown provider {name!r}; known: {', '.join(self.known())}",
                code="unknown_provider",
            )
        return parse_provider_config(found.config, config, policy)

    def check_setup(self, name: str, model: str, config: ProviderConfig) -> None:
        """What provider `name` refuses in a setup beyond its config model (its factory's
        `check`: a model id, a runtime that is missing). Raises ValidationFailed."""
        found = self.factory(name)
        if found.check is not None:
            found.check(model, config, self._settings)

    async def preload(self) -> dict[str, float]:
        """Import every factory's heavy modules in a worker thread; seconds each took."""
        return await preload({f.name: f.preload for f in self._factories.values()
                              if f.preload})

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
        return sorted(self._factories)

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
        factory = self.factory(name)
        recipe = await factory.prepare(config, BuildContext(self._settings, self._egress,
                                                            resolve))
        if recipe.key is None:  # an instance handed in: not the cache's to keep or close
            return (await recipe.build()).provider
        key = (name, *recipe.key)
        if (cached := self._cache.get(key)) is not None:
            return cached
        building = self._building.get(key)
        if building is None:
            building = asyncio.ensure_future(self._build(factory, recipe, key))
            self._building[key] = building
            building.add_done_callback(lambda done: self._built(key, done))
        # Shielded: a waiter cancelled (its turn stopped) leaves the build to the others.
        return await asyncio.shield(building)

    async def _build(self, factory: ProviderFactory, recipe: Recipe,
                     key: Hashable) -> Provider:
        # The SDK imports in a worker thread, never on the loop (at once once it is loaded,
        # and also for a factory registered after the engine's preload).
        await ensure_loaded(factory.name, factory.preload)
        built = await recipe.build()
        return await self._cache.put(key, built.provider, built.closers)

    def _built(self, key: Hashable, done: asyncio.Future[Provider]) -> None:
        self._building.pop(key, None)  # a failed build is tried again by the next caller
        if not done.cancelled():
            done.exception()  # retrieved here when every waiter went before it ended
