"""How conversations, turns and errors look in a terminal (layer: cli; imports rich and
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
    an unknown frame or event kind (the server may be newer than this client)."""

    def __init__(self, out: Console | None = None, *, speaker: str = "ator") -> None:
        self.out = out or console
        self.speaker = speaker
        self.turn_id: str | None = None
        # Text shown from deltas and not yet matched to a persisted step. A step's deltas can
        # arrive before the previous step's event is read, so this is a queue, not a flag.
        self._pending = ""
        self._open_line = False  # the cursor is after some text, not at a line start

    def started(self, turn_id: str) -> None:
        self.turn_id = turn_id

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
        """An ephemeral frame from `ator.runner.delta_listeners`: only text is drawn live."""
        if self.turn_id is not None and frame.get("turn_id") != self.turn_id:
            return
        if frame.get("type") == "TextDelta" and frame.get("text"):
            self._pending += str(frame["text"])
            self._write(str(frame["text"]))

    def _already_shown(self, text: str) -> bool:
        """Whether `text` (a persisted text block) was drawn from deltas; consumes it."""
        pending, wanted = self._pending.lstrip(), text.strip()
        if wanted and pending.startswith(wanted):
            self._pending = pending[len(wanted):]
            return True
        if pending:  # deltas and the record disagree: what was drawn stands, once
            self._pending = ""
            return True
        return False

    def event(self, event: dict[str, Any]) -> None:
        kind, data = event.get("kind"), event.get("data") or {}
        if kind == "assistant":
            self._assistant(data)
        elif kind == "tool_results":
            for result in data.get("results", []):
                self._tool_result(result)
        elif kind == "turn_ended":
            self._close_line()

    def _assistant(self, data: dict[str, Any]) -> None:
        for block in data.get("content", []):
            if block.get("type") == "text" and block.get("text"):
                if not self._already_shown(str(block["text"])):
                    self._write(str(block["text"]))
            elif block.get("type") == "tool_use":
                self._close_line()
                args = json.dumps(block.get("input", {}), ensure_ascii=False)
                self.out.print(
                    Text("  ⚙ ", style="magenta")
                    + Text(str(block.get("name")), style="bold magenta")
                    + Text(" " + _one_line(args, _RESULT_CHARS), style="magenta")
                )
        if not self._pending:  # else the next step's deltas are already on this line
            self._close_line()

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
    table = Table(title=title, title_justify="left", show_footer=True, pad_edge=False)
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
    table.add_column("cache r/w", justify="right", footer=str(tcache))
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
