"""Fixtures of the fault suite: a `Rig` of its own per test (own PostgreSQL, own Redis, own
replicas), torn down afterwards; the replicas' logs are attached to a failing report.

The suite is a CI step of its own (`make faults`): a plain `pytest` of the whole tree leaves
its tests out (deselected, reported as such) unless tests/faults is named on the command line
or ATOR_TEST_FAULTS=1 is set, since its kill loop alone takes minutes.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.rig import Rig, SmallDisk, remove, temp_root

_RIGS: list[Rig] = []
_HERE = Path(__file__).parent.resolve()


def _asked(config: pytest.Config) -> bool:
    if os.environ.get("ATOR_TEST_FAULTS") == "1":
        return True
    for arg in config.args:
        path = Path(arg.split("::")[0]).resolve()
        if path == _HERE or _HERE in path.parents:
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _asked(config):
        return
    left = [i for i in items if _HERE in Path(str(i.path)).resolve().parents]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = [i for i in items if i not in left]


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


@pytest.fixture
async def rig_on_small_disk() -> AsyncIterator[tuple[Rig, SmallDisk]]:
    """A rig whose PostgreSQL data dir (its WAL included) is a tmpfs of its own, mounted
    before the server is made: a disk a test can fill and free (needs root, as in CI)."""
    root = temp_root()
    made = Rig(root)
    disk = SmallDisk(root / "pgdata", SMALL_DISK_MB)
    _RIGS.append(made)
    try:
        disk.mount()
        made.start_servers()
        yield made, disk
    finally:
        _RIGS.remove(made)
        disk.free()  # a full disk must not keep PostgreSQL from stopping cleanly
        await made.aclose()
        disk.unmount()
        remove(root)


# A fresh cluster takes ~41 MB (16 MB of it one WAL segment): room for the migrations, the
# load and a few more WAL segments before the test fills it.
SMALL_DISK_MB = 192


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[Any]:
    report = yield
    if report.failed:
        for made in _RIGS:
            report.sections.append(("ator serve replicas (fault rig)", made.logs()))
    return report
