"""`ator worker`: jobs, schedules and the engine's reaper, without HTTP (layer: cli; imports
ator (the facade), cli.loop, obs.logging, settings).

The process opens the runtime like `ator serve` does (same database, migrations,
coordinator and event loop: uvloop, see cli.loop), starts the job runner, and waits for
SIGTERM or SIGINT. Shutdown stops claiming, gives running handlers ATOR_JOB_GRACE seconds,
and hands the rest back (queued again, their attempt not spent) before closing the engine;
exit code 0.
"""

from __future__ import annotations

import asyncio
import signal

import typer

from ator.cli import loop as event_loop
from ator.obs import tracing
from ator.obs.logging import configure_logging, get_logger
from ator.settings import Settings

__all__ = ["worker"]

log = get_logger("ator.cli.worker")


def worker() -> None:
    """Run jobs, schedules and the reaper (no HTTP). Stops cleanly on SIGTERM / SIGINT."""
    settings = Settings()
    configure_logging(json_lines=settings.log_json, level=settings.log_level)
    tracing.configure_from(settings)
    event_loop.run(_work(settings))


async def _work(settings: Settings) -> None:
    from ator import Ator
    from ator.jobs import JobKinds

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runtime = await Ator.open(settings)
    try:
        await runtime.start_jobs()
        kinds = sorted(k.name for k in runtime.service(JobKinds))
        log.info("ator worker running", extra={"kinds": kinds,
                                               "event_loop": type(loop).__module__})
        typer.echo(f"ator worker: running ({len(kinds)} job kinds, {type(loop).__module__}); "
                   "SIGTERM stops", err=True)
        await stop.wait()
        typer.echo("ator worker: stopping (finishing or handing back held jobs)", err=True)
    finally:
        await runtime.close()
