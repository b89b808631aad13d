"""`ator serve` layout decisions: how many workers, and the open-file budget (issue 12)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest
import typer

from ator.cli.openfiles import files_needed, plan_files
from ator.cli.server import choose_workers
from ator.settings import Settings


def settings(**kw: object) -> Settings:
    return Settings(**kw)  # type: ignore[arg-type]


def test_more_than_one_worker_without_redis_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as exc:
        choose_workers(settings(database_url="postgresql://x/y", redis_url=None), "2")
    assert exc.value.exit_code == 2
    assert "ATOR_REDIS_URL" in capsys.readouterr().err


def test_more_than_one_worker_on_the_embedded_database_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(typer.Exit):
        choose_workers(settings(redis_url="redis://127.0.0.1:6379/15", database_url=None), "3")
    assert "ATOR_DATABASE_URL" in capsys.readouterr().err


def test_auto_workers_use_the_cores_only_when_processes_can_agree() -> None:
    assert choose_workers(settings(redis_url=None), "auto") == 1
    both = settings(redis_url="redis://127.0.0.1:6379/15", database_url="postgresql://x/y")
    assert choose_workers(both, "auto") == (os.cpu_count() or 1)
    assert choose_workers(both, "4") == 4
    assert choose_workers(settings(), "1") == 1
    with pytest.raises(typer.Exit):
        choose_workers(both, "zero")


def test_a_low_open_file_limit_caps_turns_and_connections_and_says_how_to_fix_it() -> None:
    s = settings(max_turns_in_flight=1000, db_pool_size=20)
    needed = files_needed(s)
    assert needed > 2000
    plenty = plan_files(s, soft=needed + 5000, hard=needed + 5000, raised_from=1024)
    assert not plenty.low and plenty.warning() is None
    assert plenty.max_turns == 1000 and plenty.max_connections > 1000
    low = plan_files(s, soft=1024, hard=1024, raised_from=1024)
    assert low.low
    assert 0 < low.max_turns < 1000
    # Everything the process may open at once fits in the limit.
    assert low.max_turns * 2 + 2 * 20 + 128 + (low.max_connections - low.max_turns) <= 1024
    warning = low.warning()
    assert warning is not None and "ulimit -n" in warning and "1024" in warning


def test_serve_raises_the_soft_limit_toward_the_hard_one() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hard = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)  # a child may lower it
    low = 256
    code = ("import resource; from ator.cli.openfiles import raise_soft_limit; "
            "print(raise_soft_limit()); print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, preexec_fn=limit).stdout.splitlines()
    assert out[0] == str((low, hard, hard))
    assert int(out[1]) == hard


def test_the_gc_thresholds_setting_is_applied_after_freezing_startup(monkeypatch) -> None:
    import gc

    from ator.obs import gctune

    before = gc.get_threshold()
    try:
        monkeypatch.setenv("ATOR_GC_THRESHOLDS", "[]")
        assert Settings().gc_thresholds == ()
        gctune.tune(Settings().gc_thresholds)
        assert gc.get_threshold() == before
        monkeypatch.setenv("ATOR_GC_THRESHOLDS", "[54321, 7, 3]")
        gctune.tune(Settings().gc_thresholds)
        assert gc.get_threshold() == (54321, 7, 3) and gc.get_freeze_count() > 0
        monkeypatch.setenv("ATOR_GC_THRESHOLDS", "[1, 2]")
        with pytest.raises(ValueError, match="three non-negative"):
            Settings()
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_redis_pools_follow_the_turns_in_flight_unless_set(monkeypatch) -> None:
    """A burst of turns takes a lease each at once: pools of 32 timed out at 1,000 turns on
    two workers (bench/scale.py), so unset pools grow with the admission bound."""
    for name in ("ATOR_REDIS_POOL_SIZE", "ATOR_REDIS_REQUEST_POOL_SIZE",
                 "ATOR_MAX_TURNS_IN_FLIGHT"):
        monkeypatch.delenv(name, raising=False)
    assert (Settings().redis_pool_size, Settings().redis_request_pool_size) == (250, 250)
    assert Settings(max_turns_in_flight=40).redis_pool_size == 32
    monkeypatch.setenv("ATOR_MAX_TURNS_IN_FLIGHT", "4000")
    monkeypatch.setenv("ATOR_REDIS_POOL_SIZE", "64")
    assert (Settings().redis_pool_size, Settings().redis_request_pool_size) == (64, 1000)
