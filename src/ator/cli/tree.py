"""`ator tree THREAD`: a thread and its subagents as they run (layer: cli; imports
engine.runtime, api.views, cli.*).

Local mode reads the CLI's database (in the CLI's org, or `--org`); remote mode
(`--url`/`--key`, or ATOR_URL/ATOR_API_KEY) asks a server's `GET /v1/threads/{id}/tree`.
Both print the same nested view: per node its alias, title, status, steps, tokens, USD and
whether a turn runs now.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any
from uuid import UUID

import typer

from ator.api import views
from ator.cli.edge import load_settings, user_errors
from ator.cli.remote import ApiClient
from ator.cli.render import fail
from ator.cli.workspace import Workspace
from ator.engine.runtime import Ator
from ator.settings import Settings

__all__ = ["render_tree", "tree"]


def render_tree(node: dict[str, Any], depth: int = 0) -> list[str]:
    """One line per node, children indented under their parent."""
    name = node["alias"] or f"thread {node['id']}"
    live = "  ● live" if node["live"] else ""
    line = (f"{'  ' * depth}{'└ ' if depth else ''}{name}  {node['title'] or '-'}  "
            f"[{node['status']}]  steps={node['steps']} tokens={node['tokens']} "
            f"${node['usd']}{live}")
    lines = [line]
    for child in node["children"]:
        lines += render_tree(child, depth + 1)
    return lines


async def _local(settings: Settings, org: UUID | None, thread: UUID) -> dict[str, Any]:
    ator = await Ator.open(settings, engine=False)
    try:
        ws = await Workspace.open(ator, org_id=org)
        return views.tree(await ator.tree(ws.scope, thread))
    finally:
        await ator.close()


async def _remote(url: str, key: str, thread: UUID) -> dict[str, Any]:
    client = ApiClient(url, key)
    try:
        body = await client.get(f"/v1/threads/{thread}/tree")
    finally:
        await client.aclose()
    data: dict[str, Any] = body["data"]
    return data


def tree(
    thread: Annotated[UUID, typer.Argument(help="The thread whose tree to show.")],
    org: Annotated[UUID | None, typer.Option(
        help="Org (local mode; default: the CLI's demo org).")] = None,
    url: Annotated[str | None, typer.Option(
        envvar="ATOR_URL", help="A server to ask over HTTP (remote mode).")] = None,
    key: Annotated[str | None, typer.Option(
        envvar="ATOR_API_KEY", show_default=False, help="API key for --url.")] = None,
) -> None:
    """Show a thread and its subagents: title, status, steps, tokens, USD, live."""
    settings = load_settings()
    with user_errors(settings):
        if url is not None:
            if not key:
                fail("remote mode needs an API key", hint="pass --key or set ATOR_API_KEY")
            data = asyncio.run(_remote(url, key, thread))
        else:
            data = asyncio.run(_local(settings, org, thread))
    for line in render_tree(data):
        typer.echo(line)
