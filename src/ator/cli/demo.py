"""`ator demo`: a short real conversation on a fresh machine, then its records (layer: cli;
imports engine.runtime, cli.*).

Zero configuration: the embedded PostgreSQL in the data dir (or ATOR_DATABASE_URL) and the
default provider (the packaged local model when nothing else is configured). The org and
setup are reused from one run to the next; each run starts a new thread, sends three
messages — the later ones only make sense with the earlier answers in context — streams the
answers, and prints the turn records and their cost as the database has them.
"""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from ator.cli.conversation import LocalConversation, TurnFollower
from ator.cli.edge import describe_database, load_settings, user_errors
from ator.cli.render import TurnView, console, money, turn_table
from ator.cli.workspace import SetupSpec, Workspace, pick_provider
from ator.engine.runtime import Ator
from ator.settings import Settings

__all__ = ["MESSAGES", "demo", "demo_setup"]

MESSAGES = (
    "Hello! I am Ada. I love sailing.",
    "What do I love?",
    "Name a good place for it.",
)
PERSONA = "You are a friendly assistant. Answer in one short sentence."
# Short answers keep the demo to seconds on a small CPU; a turn that hits the cap still ends
# cleanly, with stop reason max_tokens.
CAPS = {"max_output_tokens": 96, "turn_timeout": 180}
TURN_TIMEOUT = 300.0
# A turn that answered: in full, or cut at a cap (a sampled local model sometimes runs past
# `max_output_tokens`; CI once saw it list twelve seas). Anything else stops the demo.
ANSWERED = frozenset({"done", "capped"})

# The scripted provider shows the machinery a small local model cannot: a tool call, its
# result, then an answer that echoes the message.
SCRIPT = [
    {"text": "Let me use a tool first.",
     "tool_calls": [{"name": "calculator", "input": {"expression": "6 * 7"}}]},
    {"text": "The calculator says 42.", "echo": True},
]


def demo_setup(provider: str, model: str) -> SetupSpec:
    config: dict[str, Any] = {"caps": dict(CAPS)}
    tool_policy: dict[str, Any] | None = None
    if provider == "scripted":
        config["script"] = SCRIPT
    if provider == "local":
        # The small model is never offered tools; listing them would only lengthen its prompt.
        tool_policy = {"allow": []}
    return SetupSpec("demo", provider, model, persona=PERSONA, config=config,
                     tool_policy=tool_policy)


def demo(
    provider: Annotated[str | None, typer.Option(
        help="local, scripted, anthropic or openai (default: the first one configured; the "
             "packaged local model when nothing is).")] = None,
    model: Annotated[str | None, typer.Option(
        help="Model id (default: the provider's default).")] = None,
) -> None:
    """Run a short real conversation and show what was recorded: turns, tokens, cost."""
    settings = load_settings()
    with user_errors(settings):
        ok = asyncio.run(_demo(settings, provider, model))
    if not ok:
        raise typer.Exit(1)


def _facts(rows: list[tuple[str, str]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for name, value in rows:
        table.add_row(name, value)
    return table


async def _demo(settings: Settings, provider: str | None, model: str | None) -> bool:
    provider, model = pick_provider(settings, provider, model)
    console.print(Text("ator demo", style="bold") + Text(
        " — a real conversation, persisted in PostgreSQL, every token counted"))
    with console.status("opening the database (the first run initializes it)…"):
        ator = await Ator.open(settings)
    try:
        ws = await Workspace.open(ator)
        setup, setup_reused = await ws.setup(demo_setup(provider, model))
        thread = await ator.create_thread(ws.scope, setup.id, title="ator demo")
        console.print(_facts([
            ("database", describe_database(settings)),
            ("provider", f"{provider} / {model}"
                         + (" (runs on this CPU, priced at $0)" if provider == "local" else "")),
            ("org", f"{ws.org.name} {ws.org.id} ({'reused' if ws.org_reused else 'new'})"),
            ("setup", f"{setup.id} ({'reused' if setup_reused else 'new'})"),
            ("thread", f"{thread.id} (new)"),
        ]))
        console.print()
        conversation = LocalConversation(ator, ws.scope, thread.id)
        try:
            ended = await _converse(conversation)
        finally:
            await conversation.aclose()
        turns = await ator.turns(ws.scope, thread.id)
        console.print()
        console.print(turn_table(turns, title="Turns, as recorded in the database"))
        total = sum((t.cost_usd for t in turns), Decimal(0))
        console.print()
        console.print(
            f"Total {money(total)}: {_count(len(turns), 'turn')}, "
            f"{_count(sum(t.steps for t in turns), 'model call')}, "
            f"{sum(t.input_tokens for t in turns)} tokens in, "
            f"{sum(t.output_tokens for t in turns)} out."
        )
        ok = len(ended) == len(MESSAGES) and all(d.get("status") in ANSWERED for d in ended)
        if ok:
            console.print(Text(f"Continue: ator chat --thread {thread.id}", style="dim"))
        else:
            console.print(Text("`ator doctor` shows which providers are configured.",
                               style="yellow"))
        return ok
    finally:
        await ator.close()


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


async def _converse(conversation: LocalConversation) -> list[dict[str, Any]]:
    """Send the demo messages one by one; stop early if a turn fails (the next would too)."""
    ended: list[dict[str, Any]] = []
    for text in MESSAGES:
        console.print(Text("you › ", style="bold green") + Text(text))
        view = TurnView(console)
        started = time.monotonic()
        with conversation.deltas_to(view):
            sent = await conversation.send(text)
            data = await TurnFollower(conversation, sent, view).run(timeout=TURN_TIMEOUT)
        ended.append(data)
        if data.get("status") not in ANSWERED:
            console.print(Text(f"the turn ended with {data.get('stop_reason')} after "
                               f"{time.monotonic() - started:.1f}s; stopping the demo",
                               style="red"))
            break
    return ended
