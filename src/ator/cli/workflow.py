"""`ator workflow validate|publish|run|status|cancel`: workflows on a server over its HTTP
API (layer: cli; imports ator.cli.remote, typer).

Every command takes `--url` (ATOR_URL) and `--key` (ATOR_API_KEY); answers are printed as
JSON. A problem+json answer prints its code and detail (and each recipe error's pointer)
and exits 1. The async cores (`validate`, `publish`, `start`, `status`, `cancel`) take an
`ApiClient`, so tests drive them against the app in-process.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ator.cli.remote import ApiClient, RemoteError

__all__ = ["cancel", "publish", "start", "status", "validate", "workflow_app"]

workflow_app = typer.Typer(help="Workflows on an ator server (over its HTTP API).",
                           no_args_is_help=True)

Url = Annotated[str, typer.Option(envvar="ATOR_URL", help="The server.")]
Key = Annotated[str, typer.Option(envvar="ATOR_API_KEY", show_default=False,
                                  help="An API key of the org.")]


def _recipe(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"{path} is not readable JSON: {exc}") from exc


async def validate(api: ApiClient, recipe: Any) -> dict[str, Any]:
    return await api.post("/v1/workflows/validate", {"recipe": recipe})


async def publish(api: ApiClient, name: str, recipe: Any) -> dict[str, Any]:
    """Publish a new version of the workflow `name` (made when the org has none)."""
    found = [w for w in (await api.get("/v1/workflows"))["data"] if w["name"] == name]
    workflow = found[0] if found else await api.post("/v1/workflows", {"name": name})
    return await api.post(f"/v1/workflows/{workflow['id']}/versions", {"recipe": recipe})


async def start(api: ApiClient, workflow_id: str, input: Any,
                key: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"input": input, **({"key": key} if key else {})}
    # Idempotent on the server only with a key: only then is a retry safe.
    return await api.post(f"/v1/workflows/{workflow_id}/runs", body, retries=2 if key else 0)


async def status(api: ApiClient, run_id: str) -> dict[str, Any]:
    return await api.get(f"/v1/runs/{run_id}")


async def cancel(api: ApiClient, run_id: str, reason: str) -> dict[str, Any]:
    return await api.post(f"/v1/runs/{run_id}/cancel", {"reason": reason})


def _run(url: str, key: str, call: Any) -> None:
    async def go() -> dict[str, Any]:
        api = ApiClient(url, key)
        try:
            result: dict[str, Any] = await call(api)
            return result
        finally:
            await api.aclose()

    try:
        print(json.dumps(asyncio.run(go()), indent=2))
    except RemoteError as exc:
        print(f"error {exc.code}: {exc.message}", file=sys.stderr)
        raise typer.Exit(1) from None


@workflow_app.command("validate")
def validate_cmd(recipe: Path, url: Url, key: Key) -> None:
    """Check a recipe file (errors are named by JSON pointer)."""
    _run(url, key, lambda api: validate(api, _recipe(recipe)))


@workflow_app.command("publish")
def publish_cmd(name: str, recipe: Path, url: Url, key: Key) -> None:
    """Publish a recipe file as the next version of workflow NAME (admin)."""
    _run(url, key, lambda api: publish(api, name, _recipe(recipe)))


@workflow_app.command("run")
def run_cmd(workflow_id: str, url: Url, key: Key,
            input: Annotated[str, typer.Option(help="The run's input, as JSON.")] = "{}",
            idempotency_key: Annotated[str | None, typer.Option(
                "--idempotency-key", help="The same key returns the same run.")] = None,
            ) -> None:
    """Start a run of the workflow's latest version."""
    try:
        value = json.loads(input)
    except ValueError as exc:
        raise typer.BadParameter(f"--input is not JSON: {exc}") from exc
    _run(url, key, lambda api: start(api, workflow_id, value, idempotency_key))


@workflow_app.command("status")
def status_cmd(run_id: str, url: Url, key: Key) -> None:
    """A run's status, budget use and output."""
    _run(url, key, lambda api: status(api, run_id))


@workflow_app.command("cancel")
def cancel_cmd(run_id: str, url: Url, key: Key,
               reason: Annotated[str, typer.Option(help="Kept as cancel_reason.")] = "user",
               ) -> None:
    """Cancel a run (a terminal run answers 409)."""
    _run(url, key, lambda api: cancel(api, run_id, reason))
