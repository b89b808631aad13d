"""engine.config.freeze keeps its results by what the snapshot is made of: the same inputs
give the same frozen config, any input that changes gives a new one."""

from __future__ import annotations

import dataclasses
import uuid

from ator.engine.config import freeze
from ator.settings import CapCeilings
from ator.store.turns import TurnStart


def start(**changes: object) -> TurnStart:
    base = TurnStart(
        thread_id=uuid.uuid4(), org_id=uuid.uuid4(), setup_id=uuid.UUID(int=7),
        setup_name="s", setup_version=1, provider="scripted", model="m", persona="p",
        config={"caps": {"max_steps": 5}}, tool_policy={}, instructions="be brief",
        root_id=None, depth=0, deleted=False, monthly_budget_usd=None,
        history=[], instructions_version=1, policy="", policy_version=0)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_the_same_inputs_freeze_once_and_any_change_freezes_anew() -> None:
    first = freeze(start(), engine_version="e1")
    assert freeze(start(), engine_version="e1") is first  # another thread, same inputs
    assert first.caps.max_steps == 5
    # Same version numbers, other text (another thread's instructions): another snapshot.
    other = freeze(start(instructions="be verbose"), engine_version="e1")
    assert other.hash != first.hash
    # A setup edit bumps its version: its new config is read.
    edited = freeze(start(setup_version=2, config={"caps": {"max_steps": 3}}),
                    engine_version="e1")
    assert edited.caps.max_steps == 3 and edited.hash != first.hash
    assert freeze(start(), engine_version="e2").hash != first.hash
    child = freeze(start(), engine_version="e1",
                   bounds=[{"allow": ["calculator"], "deny": ["shell"]}])
    assert child.within == (("calculator",),) and child.deny == ["shell"]
    assert child.hash != first.hash
    # Lower ceilings (an operator's setting) clamp the caps: not the unclamped result.
    clamped = freeze(start(), engine_version="e1", ceilings=CapCeilings(max_steps=4))
    assert clamped.caps.max_steps == 4
    assert freeze(start(), engine_version="e1", ceilings=CapCeilings(max_steps=4)) is clamped
