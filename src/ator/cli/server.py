"""Running `ator serve`: workers, event loop, open files (layer: cli; imports uvicorn, api.app,
cli.openfiles, settings).

`--workers N` runs N uvicorn processes on one port, each a full replica (API, engine, reaper
candidate) with its own database pool and caps (turns in flight, waits, connections);
`--workers auto` runs one per core. The default stays 1: more processes multiply every
per-process budget, which an operator should choose, not inherit. Processes agree through
the coordinator, so more than one needs Redis (the in-process coordinator cannot see the
other processes' leases and stops: two of them would run the same thread at once) and an
external PostgreSQL (each process would start its own embedded server).

uvloop and httptools are dependencies (not on Windows for uvloop); uvicorn picks them itself
when present. The soft open-file limit is raised at start; see cli.openfiles.
"""

from __future__ import annotations

import os

import typer

from ator.cli.openfiles import plan_files, raise_soft_limit
from ator.obs.logging import get_logger
from ator.settings import Settings

__all__ = ["choose_workers", "run_server"]

log = get_logger("ator.cli.server")


def choose_workers(settings: Settings, requested: str | int) -> int:
    """How many processes to run for `--workers` ("auto" = one per core; "auto" without
    Redis or an external database = 1, said in the log). Exits (code 2) when an explicit
    count cannot be correct or is not a positive number."""
    cores = os.cpu_count() or 1
    if requested == "auto":
        if settings.redis_url is None or settings.database_url is None:
            if cores > 1:
                log.warning("--workers auto: serving with one process; set ATOR_REDIS_URL "
                            "and ATOR_DATABASE_URL to use all %d cores", cores)
            return 1
        return cores
    try:
        requested = int(requested)
    except ValueError:
        requested = 0
    if requested < 1:
        typer.echo("ator serve: --workers takes a positive number or 'auto'", err=True)
        raise typer.Exit(2)
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


def run_server(settings: Settings, *, host: str, port: int, workers: str | int) -> None:
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
        # uvicorn would believe X-Forwarded-For from 127.0.0.1 by default; the app reads
        # those headers itself, from ATOR_TRUSTED_PROXIES only (api.app).
        "proxy_headers": False,
    }
    if count == 1:
        from ator.api.app import create_app

        uvicorn.run(create_app(Settings()), **common)  # type: ignore[arg-type]
    else:
        uvicorn.run("ator.api.app:worker_app", factory=True, workers=count,
                    **common)  # type: ignore[arg-type]
