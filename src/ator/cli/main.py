"""The `ator` command (layer: cli; the sync edge: the commands start their event loops here).

Commands: serve, worker, migrate, demo, chat, doctor, inspect, tree, the admin group and
the workflow and eval groups. Settings come from ATOR_* environment variables (see ator.settings).
Each command lives in its own module of this package; this one wires them into one typer app.
"""

from __future__ import annotations

import asyncio

import typer

from ator.cli.admin import admin_app
from ator.cli.chat import chat
from ator.cli.demo import demo
from ator.cli.doctor import doctor
from ator.cli.evals import eval_app
from ator.cli.inspect import inspect
from ator.cli.tree import tree
from ator.cli.webhooks import webhooks_app
from ator.cli.worker import worker
from ator.cli.workflow import workflow_app
from ator.obs import tracing
from ator.obs.logging import configure_logging
from ator.settings import Settings

__all__ = ["app", "main"]

# Locals are never printed with a traceback: they may hold keys and settings.
app = typer.Typer(help="ator: a self-hosted runtime for LLM agents.", no_args_is_help=True,
                  add_completion=False, pretty_exceptions_show_locals=False)
app.command()(demo)
app.command()(chat)
app.command()(doctor)
app.command()(inspect)
app.command()(tree)
app.command()(worker)
app.add_typer(admin_app, name="admin")
app.add_typer(workflow_app, name="workflow")
app.add_typer(webhooks_app, name="webhooks")
app.add_typer(eval_app, name="eval")


@app.command()
def serve(
    host: str | None = typer.Option(None, help="Bind address (default ATOR_HOST or 127.0.0.1)."),
    port: int | None = typer.Option(None, help="Port (default ATOR_PORT or 8080)."),
    workers: str = typer.Option(
        "1", help="Processes sharing the port: a number, or 'auto' for one per core. More "
        "than 1 needs ATOR_REDIS_URL and ATOR_DATABASE_URL; each process has its own pools "
        "and caps."),
    jobs: bool = typer.Option(
        True, "--jobs/--no-jobs", help="Also run jobs and schedules (default; ATOR_RUN_JOBS="
        "false turns them off too). With --no-jobs, run `ator worker` for them."),
) -> None:
    """Run the HTTP API, the engine and the reaper (in each of `--workers` processes)."""
    import os

    from ator.cli.server import run_server

    if not jobs:  # the edge: `--workers N` processes build their Settings from it
        os.environ["ATOR_RUN_JOBS"] = "false"
    settings = Settings()
    configure_logging(json_lines=settings.log_json, level=settings.log_level)
    tracing.configure_from(settings)
    run_server(settings, host=host or settings.host, port=port or settings.port,
               workers=workers)


@app.command()
def migrate() -> None:
    """Apply database migrations (serve does this on start too)."""
    from ator.store.database import open_database

    async def run() -> None:
        db = await open_database(Settings())
        typer.echo(f"migrated {db.url}")
        await db.close()

    asyncio.run(run())


def main() -> None:
    app()


if __name__ == "__main__":
    main()
