"""`ator inspect TURN`: what each model call of a turn was sent and why the cache broke
(layer: cli; imports engine.runtime, cli.*).

Local mode (the default) reads the configured database in the CLI's org (or `--org`), as an
admin; remote mode (`--url`/`--key`, or ATOR_URL/ATOR_API_KEY) asks a server's
`GET /v1/turns/{id}/calls`, with that key's rights. `--json` prints the inspector's records
as they are.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any
from uuid import UUID

import typer

from ator.cli.edge import load_settings, user_errors
from ator.cli.remote import ApiClient
from ator.cli.render import console, fail
from ator.cli.workspace import Workspace
from ator.engine.inspector import Inspector
from ator.engine.runtime import Ator
from ator.settings import Settings

__all__ = ["inspect", "render_call"]


def inspect(
    turn: Annotated[UUID, typer.Argument(help="The turn to inspect.")],
    org: Annotated[UUID | None, typer.Option(
        help="Org of the turn (local mode; default: the CLI's org).")] = None,
    url: Annotated[str | None, typer.Option(
        envvar="ATOR_URL", help="A server to ask over HTTP (remote mode).")] = None,
    key: Annotated[str | None, typer.Option(
        envvar="ATOR_API_KEY", show_default=False, help="API key for --url.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw records.")] = False,
) -> None:
    """Show every model call of a turn: layers, tools, cache, usage, cost, what changed."""
    settings = load_settings()
    if url is None and key is not None:
        fail("--key (ATOR_API_KEY) needs --url (ATOR_URL)")
    if url is not None and not key:
        fail("remote mode needs an API key", hint="pass --key or set ATOR_API_KEY")
    with user_errors(settings):
        calls = asyncio.run(_remote(url, key or "", turn) if url is not None
                            else _local(settings, turn, org))
    if as_json:
        typer.echo(json.dumps(calls, indent=2))
        return
    if not calls:
        console.print("no model calls in this turn")
    for call in calls:
        console.print(render_call(call), highlight=False)


async def _remote(url: str, key: str, turn: UUID) -> list[dict[str, Any]]:
    client = ApiClient(url, key)
    try:
        return list((await client.get(f"/v1/turns/{turn}/calls"))["data"])
    finally:
        await client.aclose()


async def _local(settings: Settings, turn: UUID, org: UUID | None) -> list[dict[str, Any]]:
    ator = await Ator.open(settings, engine=False)
    try:
        ws = await Workspace.open(ator, org_id=org)
        return await ator.service(Inspector).turn_calls(ws.scope, turn)
    finally:
        await ator.close()


def render_call(call: dict[str, Any]) -> str:
    """A few plain lines per call (the CLI's view; `--json` has everything)."""
    u, req, d = call["usage"], call["request"], call["diff"]
    lines = [
        f"call {call['id']} · step {call['step']} · {call['purpose']} · {call['model']} · "
        f"stop {call['stop_reason']}",
        f"  usage   in {u['input_tokens']} · cache read {u['cache_read_tokens']} · "
        f"cache write {u['cache_write_tokens']} · out {u['output_tokens']} · "
        f"${call['cost_usd']}{'' if call['priced'] else ' (unpriced)'}",
        f"  timing  {call['latency_ms']} ms · first token "
        f"{'-' if call['ttft_ms'] is None else str(call['ttft_ms']) + ' ms'}",
        f"  request {req.get('request_bytes', '?')} bytes (~{req.get('estimated_tokens', '?')} "
        f"tokens) · breakpoints {', '.join(req.get('breakpoints', [])) or 'none'}",
        "  layers  " + ", ".join(
            f"{x['name']}{'' if x.get('version') is None else ' v' + str(x['version'])} "
            f"{x['hash'][:8]} {x['chars']}c{' REPLACE' if x.get('replace') else ''}"
            for x in req.get("layers", [])),
        "  tools   " + (", ".join(
            f"{t['name']} ({t['origin']}{', on demand' if t.get('on_demand') else ''})"
            for t in req.get("tools", [])) or "none"),
    ]
    if req.get("compaction"):
        lines.append(f"  compaction {json.dumps(req['compaction'])}")
    if req.get("notifications"):
        lines.append(f"  injected {len(req['notifications'])} notification(s)")
    if d.get("previous_id") is None:
        lines.append("  diff    first call of the thread")
    else:
        broken = ", ".join(d["cache_broken_by"]) or "nothing (prefix intact)"
        also = [c for c in d["changed"] if c not in d["cache_broken_by"]]
        lines.append(f"  diff    vs call {d['previous_id']}: cache broken by {broken}"
                     + (f"; also changed: {', '.join(also)}" if also else ""))
    return "\n".join(lines)
