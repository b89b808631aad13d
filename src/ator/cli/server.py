"""Running `ator serve`: workers, event loop, open files (layer: cli; imports uvicorn, api.app,
cli.openfiles, settings).

`--workers N` runs N uvicorn processes on one port, each a full replica (API, engine, reaper
candidate) with its own database pool. Processes agree through the coordinator, so more than
one needs Redis (the in-process coordinator cannot see the other processes' leases and stops:
two of them would run the same thread at once) and an external PostgreSQL (each process would
start its own embedded server). Without Redis the default is one process, and `serve` says
how to use every core.

uvloop and httptools are used when installed (`pip install 'ator[speed]'`): uvicorn picks
them itself. The soft open-file limit is raised at start; see cli.openfiles.
"""

from __future__ import annotations

import os

import typer

from ator.cli.openfiles import plan_files, raise_soft_limit
from ator.obs.logging import get_logger
from ator.settings import Settings

__all__ = ["choose_workers", "run_server"]

log = get_logger("ator.cli.server")


def choose_workers(settings: Settings, requested: int | None) -> int:
    """How many processes to run; exits (code 2) when the layout cannot be correct."""
    cores = os.cpu_count() or 1
    if requested is None:
        if settings.redis_url is None or settings.database_url is None:
            if cores > 1:
                log.info("serving with one process; set ATOR_REDIS_URL and ATOR_DATABASE_URL "
                         "and use --workers to use all %d cores", cores)
            return 1
        return cores
    if requested > 1 and settings.redis_url is None:
        typer.echo(f"ator serve: --workers {requested} needs ATOR_REDIS_URL: the processes "
                   "must agree on which one runs a thread and where a stop goes, and the "
                   "in-process coordinator cannot see the others. Set ATOR_REDIS_URL, or use "
                   "--workers 1.", err=True)
        raise typer.Exit(2)
    if requested > 1 and settings.database_url is None:
        typer.echo(f"ator serve: --workers {requested} needs ATOR_DATABASE_URL: each process "
                   "would otherwise start its own embedded PostgreSQL on the same data "
                   "directory. Point ATOR_DATABASE_URL at one server, or use --workers 1.",
                   err=True)
        raise typer.Exit(2)
    return requested


def run_server(settings: Settings, *, host: str, port: int, workers: int | None) -> None:
    import uvicorn

    count = choose_workers(settings, workers)
    before, soft, hard = raise_soft_limit()
    budget = plan_files(settings, soft=soft, hard=hard, raised_from=before)
    if soft != before:
        log.info("raised the open-file limit from %d to %d", before, soft)
    warning = budget.warning()
    if warning is not None:
        log.warning(warning)
        typer.echo(f"ator serve: warning: {warning}", err=True)
    if budget.max_turns < settings.max_turns_in_flight:
        # The edge: worker processes build their Settings from the environment.
        os.environ["ATOR_MAX_TURNS_IN_FLIGHT"] = str(budget.max_turns)
    common = {
        "host": host, "port": port, "log_config": None, "timeout_graceful_shutdown": 10,
        # Beyond this many connections (and tasks) uvicorn answers 503 instead of accepting
        # work that would fail with EMFILE.
        "limit_concurrency": budget.max_connections,
        "backlog": 4096,
    }
    if count == 1:
        from ator.api.app import create_app

        uvicorn.run(create_app(Settings()), **common)  # type: ignore[arg-type]
    else:
        uvicorn.run("ator.api.app:worker_app", factory=True, workers=count,
                    **common)  # type: ignore[arg-type]
