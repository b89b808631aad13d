"""A CPU-burning process beside a benchmark (bench harness; imports the standard library
only): the acceptance runs some figures "beside a CPU-burning process", one busy Python loop
that takes a core for as long as the block runs."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def cpu_burner(on: bool = True) -> Iterator[None]:
    """One process spinning on a core while the block runs (nothing when `on` is False)."""
    if not on:
        yield
        return
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        burner.kill()
        burner.wait()
