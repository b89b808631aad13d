"""How conversations, turns and errors look in a terminal (layer: cli; imports rich, typer and
ator.store.records only).

`TurnView` prints one turn as it happens, from two feeds: ephemeral token deltas (live text,
in-process only) and persisted events (assistant steps with their tool calls, tool results,
the turn's end). Text already shown from deltas is not printed again when its step is
persisted; with no deltas (a remote server) each step's text appears when it is committed.
Everything is plain text when stdout is not a terminal, so the output can be piped and tested.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ator.store.records import Turn

__all__ = [
    "TurnView",
    "console",
    "err_console",
    "fail",
    "money",
    "turn_line",
    "turn_table",
]

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

_RESULT_CHARS = 300  # a tool result is summarized on one line; the full text is in the events


def fail(message: str, *, hint: str | None = None, code: int = 1) -> NoReturn:
    """Print an error (and how to fix it) on stderr and exit with `code`."""
    err_console.print(Text("error: ", style="bold red") + Text(message))
    if hint:
        err_console.print(Text("  " + hint, style="yellow"))
    raise typer.Exit(code)


def money(value: Decimal | str | float) -> str:
    return f"${Decimal(str(value)):.6f}"


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        return " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return json.dumps(content, default=str)


def turn_line(data: dict[str, Any], seconds: float | None = None) -> Text:
    """The one-line summary of a `turn_ended` event's data: reason, steps, tokens, USD."""
    usage = data.get("usage") or {}
    steps = int(data.get("steps") or 0)
    cache = int(usage.get("cache_read_tokens", 0)) + int(usage.get("cache_write_tokens", 0))
    parts = [
        f"turn {str(data.get('turn_id', ''))[:8]}",
        str(data.get("stop_reason")),
        f"{steps} step{'s' if steps != 1 else ''}",
        f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out"
        + (f" / {cache} cache" if cache else ""),
        money(data.get("cost_usd") or "0"),
    ]
    if usage and usage.get("reported") is False:
        parts.append("usage not reported by the provider")
    if seconds is not None:
        parts.append(f"{seconds:.1f}s")
    style = "dim" if data.get("status") == "done" else "bold red"
    line = Text("  ╰ " + " · ".join(parts), style=style)
    if data.get("error"):
        line.append(f"\n    {data['error']}", style="red")
    return line


class TurnView:
    """Prints one turn. Feed it `delta(frame)` and `event(event_dict)`; it never raises on
    an unknown frame or event kind (the server may be newer than this client).

    Deltas run ahead of events: a fast model can stream step 2 before step 1's tool call is
    read back from the database. Steps are counted on both feeds (a `MessageStop` frame ends
    a streamed step; an `assistant` event, plus its `tool_results` after a tool call, ends a
    persisted one) and a step's deltas are held until every earlier step is on screen, so the
    terminal shows text, tool call, result, text, in the order they happened."""

    def __init__(self, out: Console | None = None, *, speaker: str = "ator") -> None:
        self.out = out or console
        self.speaker = speaker
        self.turn_id: str | None = None
        self._streaming = 0  # ordinal of the model call whose deltas arrive now
        self._persisted = 0  # ordinal of the next assistant event
        self._ready = 0  # deltas of calls up to this ordinal may be drawn
        self._held: dict[int, str] = {}
        self._drawn: set[int] = set()  # calls whose text was drawn from deltas
        self._open_line = False  # the cursor is after some text, not at a line start
        self._early: list[dict[str, Any]] = []  # deltas that came before we knew our turn

    def started(self, turn_id: str) -> None:
        self.turn_id = turn_id
        early, self._early = self._early, []
        for frame in early:
            self.delta(frame)

    def _prefix(self) -> None:
        if not self._open_line:
            self.out.print(Text(f"{self.speaker} › ", style="bold cyan"), end="")
            self._open_line = True

    def _close_line(self) -> None:
        if self._open_line:
            self.out.print()
            self._open_line = False

    def _write(self, text: str) -> None:
        self._prefix()
        self.out.print(text, end="", markup=False, highlight=False, soft_wrap=True)
        self.out.file.flush()

    def delta(self, frame: dict[str, Any]) -> None:
        """An ephemeral delta frame (engine/wire.py): text is drawn live. Frames that come
        before the turn is known are kept (bounded) and drawn once it is, if they are ours."""
        if self.turn_id is None:
            if len(self._early) < 10_000:
                self._early.append(frame)
            return
        if frame.get("turn_id") != self.turn_id:
            return
        kind = frame.get("type")
        if kind == "TextDelta" and frame.get("text"):
            text, call = str(frame["text"]), self._streaming
            if call <= self._ready:
                self._drawn.add(call)
                self._write(text)
            else:
                self._held[call] = self._held.get(call, "") + text
        elif kind == "MessageStop":
            self._streaming += 1

    def _step_done(self, call: int) -> None:
        """Everything of model call `call` is on screen: release the next call's text."""
        self._close_line()
        self._ready = max(self._ready, call + 1)
        if held := self._held.pop(call + 1, ""):
            self._drawn.add(call + 1)
            self._write(held)

    def event(self, event: dict[str, Any]) -> None:
        kind, data = event.get("kind"), event.get("data") or {}
        if kind == "assistant":
            self._assistant(data)
        elif kind == "tool_results":
            for result in data.get("results", []):
                self._tool_result(result)
            self._step_done(self._persisted - 1)
        elif kind == "compaction":
            self._close_line()
            self.out.print(Text(
                f"  ⇣ compacted: history through event {data.get('through_seq')} summarized "
                f"({data.get('bytes_before')} -> {data.get('bytes_after')} bytes)", style="dim"))
        elif kind == "turn_ended":
            self._close_line()

    def _assistant(self, data: dict[str, Any]) -> None:
        call = self._persisted
        self._persisted += 1
        for block in data.get("content", []):
            if block.get("type") == "text" and block.get("text"):
                if call not in self._drawn:  # no deltas (remote): the record is the text
                    self._write(str(block["text"]))
            elif block.get("type") == "tool_use":
                self._close_line()
                args = json.dumps(block.get("input", {}), ensure_ascii=False)
                self.out.print(
                    Text("  ⚙ ", style="magenta")
                    + Text(str(block.get("name")), style="bold magenta")
                    + Text(" " + _one_line(args, _RESULT_CHARS), style="magenta")
                )
        if data.get("stop_reason") == "tool_use":
            self._close_line()  # its results come next, then the next call's text
        else:
            self._step_done(call)

    def _tool_result(self, result: dict[str, Any]) -> None:
        self._close_line()
        text = _one_line(_result_text(result.get("content", "")), _RESULT_CHARS)
        style = "red" if result.get("is_error") else "green"
        label = "error" if result.get("is_error") else "result"
        self.out.print(Text(f"  ↳ {result.get('name', 'tool')} {label}: ", style=style)
                       + Text(text, style="dim"))

    def ended(self, data: dict[str, Any], seconds: float | None = None) -> None:
        self._close_line()
        self.out.print(turn_line(data, seconds))


def turn_table(turns: list[Turn], *, title: str | None = None) -> Table:
    """The turn records as stored, oldest first, with a total row."""
    # No vertical rules: the nine columns fit an 80-column terminal.
    table = Table(title=title, title_justify="left", show_footer=True, box=box.SIMPLE_HEAD,
                  show_edge=False)
    total = sum((t.cost_usd for t in turns), Decimal(0))
    tin = sum(t.input_tokens for t in turns)
    tout = sum(t.output_tokens for t in turns)
    tcache = sum(t.cache_read_tokens + t.cache_write_tokens for t in turns)
    table.add_column("turn", footer="total", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("stop reason", no_wrap=True)
    table.add_column("steps", justify="right")
    table.add_column("in", justify="right", footer=str(tin))
    table.add_column("out", justify="right", footer=str(tout))
    table.add_column("cache", justify="right", footer=str(tcache))  # read/write
    table.add_column("USD", justify="right", footer=money(total), no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    for t in sorted(turns, key=lambda t: t.started_at):
        seconds = (t.ended_at - t.started_at).total_seconds() if t.ended_at else None
        status_style = "green" if t.status == "done" else "red"
        table.add_row(
            str(t.id)[:8],
            Text(t.status, style=status_style),
            t.stop_reason or "—",
            str(t.steps),
            str(t.input_tokens),
            str(t.output_tokens),
            f"{t.cache_read_tokens}/{t.cache_write_tokens}",
            money(t.cost_usd),
            f"{seconds:.1f}s" if seconds is not None else "running",
        )
    return table
