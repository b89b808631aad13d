"""The public API is deliberate: ator's top-level names are pinned here."""

from __future__ import annotations

import ator
import ator.coord
import ator.cost
import ator.testing
import ator.tools


def test_top_level_exports() -> None:
    assert sorted(ator.__all__) == ["Ator", "Scope", "Settings", "TurnResult", "__version__"]
    for name in ator.__all__:
        assert hasattr(ator, name)


def test_subpackage_exports_resolve() -> None:
    for module in (ator.coord, ator.cost, ator.tools, ator.testing):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"


def test_the_package_root_is_lazy() -> None:
    """Importing a small module must not load the engine, the database driver or the SDKs."""
    import subprocess
    import sys

    code = (
        "import sys, ator.errors, ator.settings, ator.outcome; "
        "heavy = [m for m in ('ator.engine.runtime', 'sqlalchemy', 'asyncpg', 'anthropic', "
        "'openai', 'fastapi') if m in sys.modules]; print(len(sys.modules), heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split(" ", 1)
    assert out[1].strip() == "[]", out
    assert int(out[0]) < 400, out  # pydantic for settings; was 843 with the eager root
