"""How a provider name becomes a provider: the factory a provider registers (layer: providers;
imports providers.base, providers.config, net, settings, jsonenc).

A `ProviderFactory` is everything ator needs to know about one provider name:

- `config`: the typed model a setup's config must pass (`providers.config`; its
  `check_policy` holds the operator's rules), `CustomConfig` when the provider takes any keys;
- `prepare(config, ctx)`: turns a setup's config into a `Recipe` - a cache key (a
  fingerprint of every argument the provider is built with, credentials only as a hash) and
  the coroutine that builds it. The registry builds once per key and reuses the result;
- `preload`: modules to import in a worker thread (a heavy SDK): when the engine starts, and
  before the first build if that comes first, so no call imports them on the event loop
  (`providers.preload`);
- `default_model`: what a command uses when only the provider is named;
- `sessions`: the provider keeps state per thread (a CLI runtime's session id): the engine
  reads it before the turn's first call and hands it over in `ModelRequest.session`;
- `check(model, config, settings)`: run when a setup is written, after its config passed
  its model: refuses what cannot run here (a model id that may not reach an argv, a CLI
  not installed or not logged in) with a 422 naming the field;
- `one_prompt`: the provider takes one prompt, not a conversation: the turn packs its
  context with the single-prompt context manager (agent/single_prompt.py) instead of
  compacting it;
- `own_tools`: the provider runs its own tools (an agent CLI): ator's are not mounted.

The built-in providers register through this type exactly as an outside one does
(`providers.builtin`); `ProviderRegistry.register_factory` adds one at run time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ator import jsonenc
from ator.net import Egress
from ator.providers.base import Provider
from ator.providers.config import CustomConfig, ProviderConfig
from ator.settings import Settings

__all__ = ["BuildContext", "Built", "ProviderFactory", "Recipe", "SecretResolver", "SetupCheck"]

SecretResolver = Callable[[str], Awaitable[str]]
Closer = Callable[[], Awaitable[None]]
SetupCheck = Callable[[str, ProviderConfig, Settings], None]


@dataclass(frozen=True, slots=True)
class BuildContext:
    """What a factory may use to build: process settings, the egress factory every HTTP
    client must be built on, and the resolver of the setup's secret references."""

    settings: Settings
    egress: Egress
    resolve: SecretResolver


@dataclass(slots=True)
class Built:
    """A built provider and what closes it (its HTTP client), in order."""

    provider: Provider
    closers: list[Closer] = field(default_factory=list)

    @classmethod
    def of(cls, provider: Provider, *more: Closer) -> Built:
        """`provider` closed by its own `aclose` (if it has one), then `more`."""
        aclose = getattr(provider, "aclose", None)
        return cls(provider, [*([aclose] if aclose is not None else []), *more])


@dataclass(frozen=True, slots=True)
class Recipe:
    """How to build one provider: `key` names everything it is built from (two configs with
    the same key share one provider; None: build every time, neither cached nor closed by the
    registry), `build` makes it."""

    key: tuple[str, ...] | None
    build: Callable[[], Awaitable[Built]]


Prepare = Callable[[Mapping[str, Any], BuildContext], Awaitable[Recipe]]


@dataclass(frozen=True, slots=True)
class ProviderFactory:
    name: str
    prepare: Prepare
    config: type[ProviderConfig] = CustomConfig
    preload: tuple[str, ...] = ()
    default_model: str | None = None
    sessions: bool = False
    check: SetupCheck | None = None
    one_prompt: bool = False
    own_tools: bool = False

    @classmethod
    def of(
        cls,
        name: str,
        make: Callable[[Mapping[str, Any]], Provider],
        *,
        config: type[ProviderConfig] = CustomConfig,
        default_model: str | None = None,
        sessions: bool = False,
    ) -> ProviderFactory:
        """A factory for a provider built from its config alone (no credentials, no HTTP):
        one provider per distinct config."""

        async def prepare(values: Mapping[str, Any], ctx: BuildContext) -> Recipe:
            async def build() -> Built:
                return Built.of(make(values))

            return Recipe((jsonenc.canonical(dict(values)).decode(),), build)

        return cls(name, prepare, config, default_model=default_model, sessions=sessions)

    @classmethod
    def instance(cls, name: str, provider: Provider, *,
                 config: type[ProviderConfig] = CustomConfig, sessions: bool = False,
                 ) -> ProviderFactory:
        """A factory that always answers with `provider` (tests, embedders): the registry
        neither caches nor closes it."""

        async def prepare(values: Mapping[str, Any], ctx: BuildContext) -> Recipe:
            async def build() -> Built:
                return Built(provider)

            return Recipe(None, build)

        return cls(name, prepare, config, sessions=sessions)
