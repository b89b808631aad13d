"""Fixtures of the fault suite: a `Rig` of its own per test (own PostgreSQL, own Redis, own
replicas), torn down afterwards; the replicas' logs are attached to a failing report."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.faults.rig import Rig, remove, temp_root

_RIGS: list[Rig] = []


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    root = temp_root()
    made = Rig(root)
    _RIGS.append(made)
    try:
        made.start_servers()
        yield made
    finally:
        _RIGS.remove(made)
        await made.aclose()
        remove(root)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[Any]:
    report = yield
    if report.failed:
        for made in _RIGS:
            report.sections.append(("ator serve replicas (fault rig)", made.logs()))
    return report
