"""`make lint`'s transport contract is an allow-list: a transport importing a module that
was never allowed — a new `store/` repository, an engine internal — breaks it. Checked by
planting such imports in a copy of the package (never the real tree) and running the real
`lint-imports` on it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _copy(tmp: Path) -> Path:
    shutil.copytree(ROOT / "src" / "ator", tmp / "src" / "ator",
                    ignore=shutil.ignore_patterns("__pycache__", "dist", "node_modules"))
    shutil.copytree(ROOT / "lint", tmp / "lint", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    return tmp / "src" / "ator"


def _lint(tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
                          cwd=tmp, env={"PYTHONPATH": str(tmp / "src"), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)


def test_a_transport_importing_a_new_store_module_fails_lint(tmp_path: Path) -> None:
    package = _copy(tmp_path)
    (package / "store" / "planted.py").write_text('"""A new repository."""\nROWS = 1\n')
    (package / "api" / "planted.py").write_text(
        '"""A route that reads a repository directly."""\nfrom ator.store import planted\n\n'
        "ROWS = planted.ROWS\n")
    (package / "realtime" / "planted.py").write_text(
        '"""A socket handler that reaches an engine internal."""\n'
        "from ator.engine import steps\n\nSTEPS = steps\n")
    result = _lint(tmp_path)
    assert result.returncode != 0, result.stdout
    assert "ator.api.planted -> ator.store.planted" in result.stdout
    assert "ator.realtime.planted -> ator.engine.steps" in result.stdout
    assert "Contracts: 1 kept, 1 broken." in result.stdout


def test_the_copy_without_a_planted_import_passes(tmp_path: Path) -> None:
    _copy(tmp_path)
    result = _lint(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
