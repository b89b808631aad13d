"""Loading the provider SDKs off the event loop (layer: providers; imports the standard library,
and the modules a factory names, in a worker thread).

Importing `anthropic` takes about a second and `openai` about half of that (hundreds of pydantic
models). Done by the first model call of a process, on the event loop, that froze every other
task of the replica - health checks, stops, other tenants' turns - for as long. So the engine
preloads what every registered factory names (`ProviderFactory.preload`,
`ProviderRegistry.preload`) when it starts, and the registry awaits
`ensure_loaded(name, modules)` before a factory builds: a call that comes before the preload
finished (or a factory registered after it) waits in a worker thread, never on the loop.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Mapping, Sequence
from typing import Final

__all__ = ["ensure_loaded", "preload"]

#: Loaded by the first request of any SDK client (the transport's async backend, the SDK's
#: trace-context propagation); optional, so a missing one is not an error.
_FIRST_REQUEST: Final = ("anyio._backends._asyncio", "opentelemetry.propagate")

# Names whose modules finished importing. A module appears in sys.modules as soon as its import
# *starts*, so sys.modules cannot tell a half-imported SDK from a loaded one; this set can.
# Process-wide on purpose, as the import system it mirrors is.
_loaded: set[str] = set()


def _import(modules: Sequence[str]) -> None:
    for module in modules:
        importlib.import_module(module)
    for module in _FIRST_REQUEST:
        try:
            importlib.import_module(module)
        except ImportError:
            continue  # not installed: then nothing loads it on the first request either


async def ensure_loaded(name: str, modules: Sequence[str]) -> None:
    """Import `modules` (what provider `name` needs: the SDK, the SDK's lazily loaded
    resource the adapter calls, the adapter itself) in a worker thread; immediate once `name`
    is loaded, or when there is nothing to import (scripted, local: nothing heavy at import).

    Concurrent callers each wait in their own worker thread on Python's import lock, not on
    the event loop. Raises ImportError if the SDK is not installed.
    """
    if not modules or name in _loaded:
        return
    await asyncio.to_thread(_import, modules)
    _loaded.add(name)


async def preload(modules: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """Load each provider's `modules` off the loop, one provider after the other; seconds
    each took.

    Meant to be started when the engine starts (awaited, or as a background task: a first call
    that comes earlier waits for it through `ensure_loaded`).
    """
    took: dict[str, float] = {}
    for name, needed in modules.items():
        started = time.perf_counter()
        await ensure_loaded(name, needed)
        took[name] = time.perf_counter() - started
    return took
