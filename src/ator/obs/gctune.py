"""Garbage-collector settings for a long-running server (layer: obs; imports gc only).

A server holding thousands of long-lived objects (sockets, feeds, pooled connections, the
imported code) pays for all of them in every full collection: with Python's default
thresholds (700, 10, 10) a generation-2 pass comes every ~70,000 net allocations and walks
every tracked object, a pause of hundreds of milliseconds with 1,000 sockets connected, which
every token delta in flight waits out (`bench/realtime_latency.py --server-gc python`
compares).
`tune` collects once, freezes what startup made (it lives as long as the process) and raises
the thresholds so that full passes are rare; reference cycles are still collected, later.
"""

from __future__ import annotations

import gc

__all__ = ["tune"]


def tune(thresholds: tuple[int, ...]) -> None:
    """Apply the three `thresholds` after startup (empty: leave Python's own alone)."""
    if not thresholds:
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
