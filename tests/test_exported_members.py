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
