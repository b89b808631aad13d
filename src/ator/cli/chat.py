"""`ator chat`: talk to a thread, one message or a session (layer: cli; imports
engine.runtime, cli.*).

Local mode (the default) runs ator in this process on the configured database, in the CLI's
org, with a setup and thread remembered in the data dir. Remote mode (`--url`/`--key`, or
ATOR_URL/ATOR_API_KEY) only speaks HTTP to a server. Either way the answer is shown as it is
produced, tool calls and results as they happen, and each turn ends with its tokens and cost.

The session is synchronous at the edge: one event loop (`asyncio.Runner`) runs each turn, so
Ctrl-C while a turn runs stops that turn (on whichever replica runs it) and shows how it ended,
and Ctrl-C or Ctrl-D at the prompt leaves.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Annotated, Any
from uuid import UUID

import typer
from rich.text import Text

from ator.cli.conversation import Conversation, LocalConversation, RemoteConversation, TurnFollower
from ator.cli.edge import describe_database, load_settings, user_errors
from ator.cli.remote import ApiClient
from ator.cli.render import TurnView, console, err_console, fail
from ator.cli.workspace import SetupSpec, Workspace, pick_provider
from ator.engine.runtime import Ator
from ator.settings import Settings

__all__ = ["chat", "chat_setup"]

_QUIT = {"/quit", "/exit", "/q"}


def chat_setup(provider: str, model: str) -> SetupSpec:
    # The small local model is never offered tools; listing them would only lengthen its prompt.
    policy: dict[str, Any] | None = {"allow": []} if provider == "local" else None
    return SetupSpec("chat", provider, model, tool_policy=policy)


@dataclass
class _Session:
    conversation: Conversation
    header: Text
    close: Callable[[], Coroutine[Any, Any, None]]
    deltas: Callable[[TurnView], AbstractContextManager[Any]]


def chat(
    message: Annotated[str | None, typer.Argument(
        help="Send this message, print the answer and exit. Omit for a session.")] = None,
    thread: Annotated[UUID | None, typer.Option(help="Continue this thread.")] = None,
    new: Annotated[bool, typer.Option("--new", help="Start a new thread (local mode).")] = False,
    setup: Annotated[UUID | None, typer.Option(
        help="Setup of a new thread (default: local mode makes one, remote mode takes the "
             "org's first).")] = None,
    org: Annotated[UUID | None, typer.Option(
        help="Org (local mode; default: the CLI's demo org).")] = None,
    provider: Annotated[str | None, typer.Option(
        help="Provider of a new local setup (default: the first configured).")] = None,
    model: Annotated[str | None, typer.Option(help="Model of a new local setup.")] = None,
    url: Annotated[str | None, typer.Option(
        envvar="ATOR_URL", help="A server to talk to over HTTP (remote mode).")] = None,
    key: Annotated[str | None, typer.Option(
        envvar="ATOR_API_KEY", show_default=False, help="API key for --url.")] = None,
    timeout: Annotated[float, typer.Option(
        help="Give up following a turn after this many seconds.")] = 600.0,
) -> None:
    """Chat with an agent: in this process (default) or on a server (--url)."""
    settings = load_settings()
    if url is None and key is not None:
        fail("--key (ATOR_API_KEY) needs --url (ATOR_URL)")
    if thread is not None and (setup or provider or model or new):
        fail("--thread continues a thread; --setup/--provider/--model/--new start a new one")
    with user_errors(settings), asyncio.Runner() as runner:
        if url is not None:
            if provider or model or org or new:
                fail("--provider, --model, --org and --new are for local mode; with --url, "
                     "pick a setup with --setup or a thread with --thread")
            if not key:
                fail("remote mode needs an API key", hint="pass --key or set ATOR_API_KEY")
            session = runner.run(_open_remote(url, key, thread, setup))
        else:
            session = runner.run(_open_local(settings, thread=thread, new=new, setup=setup,
                                             org=org, provider=provider, model=model))
        try:
            err_console.print(session.header)
            if message is not None:
                data = _turn(runner, session, message, timeout)
                ok = data.get("status") == "done"
            else:
                _repl(runner, session, timeout)
                ok = True
        finally:
            runner.run(session.close())
    if not ok:
        raise typer.Exit(1)


def _setup_label(name: str, provider: str, model: str) -> str:
    which = f"{provider}/{model}"
    return name if which in name else f"{name} ({which})"


async def _open_local(
    settings: Settings, *, thread: UUID | None, new: bool, setup: UUID | None, org: UUID | None,
    provider: str | None, model: str | None,
) -> _Session:
    ator = await Ator.open(settings)
    try:
        ws = await Workspace.open(ator, org_id=org)
        if thread is not None:
            current = await ws.thread_by_id(thread)
            ws.remember_chat_thread(current)
            continued = True
            chosen = await ws.setup_by_id(current.setup_id)
        else:
            if setup is not None:
                chosen = await ws.setup_by_id(setup)
            else:
                chosen, _ = await ws.setup(chat_setup(*pick_provider(settings, provider, model)))
            current, continued = await ws.chat_thread(chosen, new=new)
    except BaseException:
        await ator.close()
        raise
    conversation = LocalConversation(ator, ws.scope, current.id)
    header = Text.assemble(
        ("local", "bold"), f" · {describe_database(settings)} · org {ws.org.name} · setup ",
        (_setup_label(chosen.name, chosen.provider, chosen.model), "bold"),
        f" · thread {current.id} ",
        ("(continued)" if continued else "(new)", "dim"),
    )
    async def close() -> None:
        try:
            await conversation.aclose()
        finally:
            await ator.close()

    return _Session(conversation, header, close, conversation.deltas_to)


async def _open_remote(url: str, key: str, thread: UUID | None, setup: UUID | None) -> _Session:
    api = ApiClient(url, key)
    try:
        if thread is not None:
            current = await api.get(f"/v1/threads/{thread}")
            chosen = await api.get(f"/v1/setups/{current['setup_id']}")
            note = "(continued)"
        else:
            if setup is not None:
                chosen = await api.get(f"/v1/setups/{setup}")
            else:
                found = (await api.get("/v1/setups"))["data"]
                if not found:
                    fail("this org has no setup on the server",
                         hint="create one (POST /v1/setups with an admin key) or pass --setup")
                chosen = found[0]
            current = await api.post("/v1/threads", {"setup_id": chosen["id"],
                                                     "title": "ator chat"})
            note = f"(new; continue it with --thread {current['id']})"
    except BaseException:
        await api.aclose()
        raise
    header = Text.assemble(
        ("remote", "bold"), f" · {api.base_url} · setup ",
        (_setup_label(str(chosen["name"]), str(chosen["provider"]), str(chosen["model"])),
         "bold"),
        f" · thread {current['id']} ", (note, "dim"),
    )
    conversation = RemoteConversation(api, str(current["id"]))
    return _Session(conversation, header, api.aclose, lambda view: nullcontext())


def _turn(runner: asyncio.Runner, session: _Session, text: str, timeout: float) -> dict[str, Any]:
    """Send one message and show its turn; Ctrl-C stops the turn and shows how it ended."""
    view = TurnView(console)
    with session.deltas(view):
        sent = runner.run(session.conversation.send(text))
        follower = TurnFollower(session.conversation, sent, view)
        try:
            return runner.run(follower.run(timeout=timeout))
        except KeyboardInterrupt:
            err_console.print(Text("\nstopping the turn… (Ctrl-C again to leave at once)",
                                   style="yellow"))
            runner.run(session.conversation.stop())
            return runner.run(follower.run(timeout=60.0))


def _read_line(interactive: bool) -> str | None:
    """The next line, or None at end of input."""
    if interactive:
        try:
            return console.input(Text("you › ", style="bold green"))
        except EOFError:
            console.print()
            return None
    line = sys.stdin.readline()
    if not line:
        return None
    if line.strip():
        # Piped input is not echoed by a terminal: show it, so the transcript reads as a
        # dialogue.
        console.print(Text("you › ", style="bold green") + Text(line.strip()))
    return line


def _repl(runner: asyncio.Runner, session: _Session, timeout: float) -> None:
    interactive = sys.stdin.isatty()
    if interactive:
        err_console.print(Text("/quit or Ctrl-D leaves; Ctrl-C stops a running turn.",
                               style="dim"))
    while True:
        try:
            line = _read_line(interactive)
        except KeyboardInterrupt:
            console.print()
            return
        if line is None:
            return
        text = line.strip()
        if not text:
            continue
        if text in _QUIT:
            return
        _turn(runner, session, text, timeout)
