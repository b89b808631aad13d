"""`ator eval run KIND` and `ator eval run --ci`: analysis kinds' eval sets (layer: cli;
imports ator.analyses, ator.cli.remote, typer).

Locally (no server): a built-in kind's fixed-output cases run through the validator every
run uses, and are scored; `--ci` runs every built-in kind's cases and exits 1 when any case
fails or a kind has fewer than 4 (what CI runs: tests/test_evals.py). With `--url` and
`--key`, the server runs the org's kind (built-in or its own) and stores the run, compared
with the kind's previous one (`POST /v1/analyses/kinds/{kind}/evals`).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated, Any

import typer

from ator.analyses import EvalReport, builtin_kinds, ci, run_cases
from ator.cli.remote import ApiClient, RemoteError

__all__ = ["ci_mode", "eval_app"]

eval_app = typer.Typer(help="Eval sets of analysis kinds.", no_args_is_help=True)


def ci_mode() -> tuple[bool, list[EvalReport]]:
    """Every built-in kind's fixed-output cases (the sync edge: asyncio.run is here)."""
    return asyncio.run(ci(builtin_kinds("scripted", "scripted")))


def _print(reports: list[EvalReport]) -> None:
    for r in reports:
        print(f"{r.kind} v{r.version}: {r.passed}/{r.cases} passed ({r.score:.0%})")
        for case in r.results:
            if not case["passed"]:
                print(f"  FAIL {case['case']}: expected {case['expect']}, got {case['got']}"
                      f" {case['problems']}")


@eval_app.command("run")
def run_cmd(
    kind: Annotated[str | None, typer.Argument(help="The kind (omit with --ci).")] = None,
    ci_all: Annotated[bool, typer.Option("--ci", help="Every built-in kind; exit 1 on a "
                                                      "failed case.")] = False,
    url: Annotated[str | None, typer.Option(envvar="ATOR_URL", help="A server: run the "
                                            "org's kind there and store the run.")] = None,
    key: Annotated[str | None, typer.Option(envvar="ATOR_API_KEY", show_default=False,
                                            help="An API key of the org.")] = None,
) -> None:
    """Run a kind's eval set and print its score."""
    if ci_all:
        ok, reports = ci_mode()
        _print(reports)
        raise typer.Exit(0 if ok else 1)
    if kind is None:
        raise typer.BadParameter("name a KIND, or pass --ci")
    if url and key:
        _remote(url, key, kind)
        return
    found = {k.name: k for k in builtin_kinds("scripted", "scripted")}
    if kind not in found:
        print(f"no built-in kind {kind!r} (an org's kind runs on its server: --url, --key)",
              file=sys.stderr)
        raise typer.Exit(2)
    report = asyncio.run(run_cases(found[kind]))
    _print([report])
    raise typer.Exit(0 if report.passed == report.cases else 1)


def _remote(url: str, key: str, kind: str) -> None:
    async def go() -> dict[str, Any]:
        api = ApiClient(url, key)
        try:
            result: dict[str, Any] = await api.post(f"/v1/analyses/kinds/{kind}/evals", {})
            return result
        finally:
            await api.aclose()

    try:
        result = asyncio.run(go())
    except RemoteError as exc:
        print(f"error {exc.code}: {exc.message}", file=sys.stderr)
        raise typer.Exit(1) from None
    print(json.dumps(result, indent=2))
    if result["passed"] != result["cases"]:
        raise typer.Exit(1)
