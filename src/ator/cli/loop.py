"""The event loop of the commands that run the engine (layer: cli; imports uvloop when
installed).

`ator serve` runs on uvloop: uvicorn takes it itself when it is installed. `ator worker` runs
the same engine without HTTP (jobs, workflows, analyses, webhooks, the reaper), so it takes
the same loop here, and every process that runs turns and jobs runs on one kind of loop
(what is measured, and tested, is then what runs). What uvloop saves on one turn is small
and within this 2-core machine's noise: `bench/event_loop.py` read 0-12% less CPU per turn.
Where uvloop is not installed (it is not on Windows), the standard loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run"]

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on uvloop when it is installed, else on the standard loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover (a dependency wherever it builds)
        return asyncio.run(main)
    return uvloop.run(main)
