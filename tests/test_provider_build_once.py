"""Turns that miss the provider cache together share one build (providers/registry.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from ator.providers.factory import BuildContext, Built, ProviderFactory, Recipe
from ator.providers.registry import ProviderRegistry
from ator.providers.scripted import ScriptedProvider
from ator.settings import Settings


def _factory(builds: list[int], fail: list[bool]) -> ProviderFactory:
    async def prepare(values: Mapping[str, Any], ctx: BuildContext) -> Recipe:
        async def build() -> Built:
            builds.append(1)
            await asyncio.sleep(0.05)  # an SDK client takes a while: others miss meanwhile
            if fail and fail.pop(0):
                raise RuntimeError("the build failed")
            return Built(ScriptedProvider([]))
        return Recipe(("same",), build)
    return ProviderFactory("counted", prepare)


def _registry(builds: list[int], fail: list[bool]) -> ProviderRegistry:
    registry = ProviderRegistry(Settings())
    registry.register_factory(_factory(builds, fail))
    return registry


async def _secret(ref: str) -> str:
    raise AssertionError("no secret is read")


async def test_a_burst_of_misses_builds_one_provider_and_shares_it() -> None:
    builds: list[int] = []
    registry = _registry(builds, [])
    got = await asyncio.gather(*(registry.build("counted", {}, _secret) for _ in range(50)))
    assert len(builds) == 1
    assert all(p is got[0] for p in got)
    assert registry.cached == 1
    await registry.aclose()


async def test_a_failed_build_fails_its_waiters_and_the_next_call_builds_again() -> None:
    builds: list[int] = []
    registry = _registry(builds, [True])
    results = await asyncio.gather(*(registry.build("counted", {}, _secret) for _ in range(5)),
                                   return_exceptions=True)
    assert len(builds) == 1
    assert all(isinstance(r, RuntimeError) for r in results)
    await registry.build("counted", {}, _secret)
    assert len(builds) == 2 and registry.cached == 1
    await registry.aclose()


async def test_a_cancelled_waiter_leaves_the_build_to_the_others() -> None:
    builds: list[int] = []
    registry = _registry(builds, [])
    first = asyncio.ensure_future(registry.build("counted", {}, _secret))
    second = asyncio.ensure_future(registry.build("counted", {}, _secret))
    await asyncio.sleep(0.01)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await second is not None
    assert len(builds) == 1 and registry.cached == 1
    await registry.aclose()
