"""Loading the provider SDKs off the event loop (layer: providers; imports the standard library,
and the adapter modules by name, in a worker thread).

Importing `anthropic` takes about a second and `openai` about half of that (hundreds of pydantic
models). Done by the first model call of a process, on the event loop, that froze every other
task of the replica - health checks, stops, other tenants' turns - for as long. So the engine
calls `preload()` when it starts, and whatever imports an adapter lazily (the registry) first
awaits `ensure_loaded(name)`: a call that comes before the preload finished waits for it in a
worker thread, never on the loop.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = ["PRELOADABLE", "ensure_loaded", "preload"]

#: What each provider name needs imported before its first call: the SDK, the SDK's lazily
#: loaded resource the adapter calls, and the adapter itself.
PRELOADABLE: Final[Mapping[str, tuple[str, ...]]] = {
    "anthropic": ("anthropic", "anthropic.resources.messages", "ator.providers.anthropic"),
    "openai": (
        "openai",
        "openai.resources.chat.chat",
        "openai.resources.chat.completions.completions",
        "openai.lib.streaming.chat",
        "ator.providers.openai",
    ),
}
#: Loaded by the first request of any SDK client (the transport's async backend, the SDK's
#: trace-context propagation); optional, so a missing one is not an error.
_FIRST_REQUEST: Final = ("anyio._backends._asyncio", "opentelemetry.propagate")

# Names whose modules finished importing. A module appears in sys.modules as soon as its import
# *starts*, so sys.modules cannot tell a half-imported SDK from a loaded one; this set can.
# Process-wide on purpose, as the import system it mirrors is.
_loaded: set[str] = set()


def _import(modules: tuple[str, ...]) -> None:
    for module in modules:
        importlib.import_module(module)
    for module in _FIRST_REQUEST:
        try:
            importlib.import_module(module)
        except ImportError:
            continue  # not installed: then nothing loads it on the first request either


async def ensure_loaded(name: str) -> None:
    """Import what provider `name` needs, in a worker thread; immediate once it is loaded.

    Unknown names (scripted, local: nothing heavy at import) return at once. Concurrent callers
    each wait in their own worker thread on Python's import lock, not on the event loop.
    Raises ImportError if the SDK is not installed.
    """
    modules = PRELOADABLE.get(name)
    if modules is None or name in _loaded:
        return
    await asyncio.to_thread(_import, modules)
    _loaded.add(name)


async def preload(names: Iterable[str] = tuple(PRELOADABLE)) -> dict[str, float]:
    """Load the SDKs of `names` off the loop, one after the other; seconds each took.

    Meant to be started when the engine starts (awaited, or as a background task: a first call
    that comes earlier waits for it through `ensure_loaded`).
    """
    took: dict[str, float] = {}
    for name in names:
        started = time.perf_counter()
        await ensure_loaded(name)
        took[name] = time.perf_counter() - started
    return took
