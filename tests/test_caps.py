"""Caps have operator ceilings: a setup cannot ask for more than the operator allows, and
nothing but finite numbers gets through."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from ator.agent.caps import Caps
from ator.errors import ConfigError
from ator.settings import CapCeilings, Settings
from ator.subagents.caps import SubagentCaps
from tests.test_api import _org_with_admin, api, auth

__all__ = ["api"]  # the fixture, re-used


def test_every_cap_has_a_ceiling_and_every_default_is_under_it() -> None:
    # The loop's caps and the subagent extension's: every one the operator can ceil.
    groups = (Caps, SubagentCaps)
    caps = {f.name for g in groups for f in dataclasses.fields(g)}
    assert caps == set(CapCeilings.model_fields)
    ceilings = CapCeilings()
    for group in groups:
        for f in dataclasses.fields(group):
            assert getattr(group(), f.name) <= getattr(ceilings, f.name), f.name


@pytest.mark.parametrize(("cap", "value", "ceiling"), [
    ("max_steps", 1e29, "200"),
    ("turn_timeout", 1e308, "3600"),
    ("provider_retries", 1e6, "10"),
    ("max_output_tokens", 128_001, "128000"),
])
def test_values_above_the_ceiling_are_refused_with_the_cap_and_the_ceiling(
    cap: str, value: float, ceiling: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        Caps.from_config({cap: value})
    assert caught.value.status == 422 and caught.value.code == "cap_above_ceiling"
    assert cap in caught.value.message and ceiling in caught.value.message


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinity_are_refused(value: float) -> None:
    for cap in ("turn_timeout", "max_steps", "stall_timeout"):
        with pytest.raises(ConfigError) as caught:
            Caps.from_config({cap: value})
        assert caught.value.status == 422 and caught.value.code == "invalid_cap"


def test_the_operator_sets_ceilings_and_defaults_above_them_come_down() -> None:
    settings = Settings(cap_ceilings='{"max_steps": 10, "turn_timeout": 60}')
    ceilings = settings.cap_ceilings
    assert (ceilings.max_steps, ceilings.turn_timeout) == (10, 60)
    assert ceilings.provider_retries == 10  # the others keep their defaults
    with pytest.raises(ConfigError, match="max_steps"):
        Caps.from_config({"max_steps": 11}, ceilings)
    caps = Caps.from_config({"max_steps": 10}, ceilings)
    assert caps.max_steps == 10 and caps.turn_timeout == 60  # default 600 lowered to 60
    assert Caps.from_config(None, ceilings).max_steps == 10
    # At turn start, a setup written under higher ceilings is lowered, not broken.
    clamped = Caps.from_config({"max_steps": 50, "tool_timeout": 5}, ceilings, clamp=True)
    assert (clamped.max_steps, clamped.tool_timeout, clamped.turn_timeout) == (10, 5, 60)
    with pytest.raises(ConfigError):
        Caps.from_config({"max_steps": float("nan")}, ceilings, clamp=True)
    with pytest.raises(ValueError):
        Settings(cap_ceilings='{"max_stepz": 10}')
    with pytest.raises(ValueError):
        Settings(cap_ceilings='{"turn_timeout": "Infinity"}')


async def test_a_setup_above_a_ceiling_is_a_422_at_write_time(api: Any) -> None:
    client, operator, _ = api
    admin = await _org_with_admin(client, operator, "greedy")
    for caps in ({"max_steps": 1e29}, {"turn_timeout": 1e308}, {"provider_retries": 1e6}):
        made = await client.post("/v1/setups", headers=auth(admin), json={
            "name": "s", "provider": "scripted", "model": "scripted", "config": {"caps": caps}})
        assert made.status_code == 422, made.text
        body = made.json()
        assert body["code"] == "cap_above_ceiling" and next(iter(caps)) in body["detail"]
    # NaN is not JSON, but Python's parser reads it: refused all the same.
    raw = json.dumps({"name": "s", "provider": "scripted", "model": "scripted",
                      "config": {"caps": {"turn_timeout": float("nan")}}})
    nan = await client.post("/v1/setups", headers={**auth(admin), "content-type":
                                                   "application/json"}, content=raw)
    assert nan.status_code == 422
    fine = await client.post("/v1/setups", headers=auth(admin), json={
        "name": "s", "provider": "scripted", "model": "scripted",
        "config": {"caps": {"max_steps": 200, "turn_timeout": 3600}}})
    assert fine.status_code == 201, fine.text
