"""A CLI run as a provider call (layer: providers; imports providers.base, providers.cli.*,
errors).

`run_cli` drives one run: start the CLI in its jail with the prompt on stdin, read its JSON
lines into the parser's events, and end it:

- after the terminal line (`result`, `turn.completed`/`turn.failed`) the CLI gets
  `after_result` seconds to exit, then its group is stopped (users report hangs there);
- a line that is not a JSON object ends the call `cli_bad_output`, one over the size cap
  `cli_line_too_long`, an exit with no terminal line `cli_no_result`, a non-zero exit ator
  did not cause `cli_exit` (with the tail of stderr);
- before an error is raised, what the CLI reported (usage, cost) is yielded as a
  `UsageUpdate`, so the turn bills the call at that figure and keeps what streamed;
- whatever ends the generator - the end, an error, the loop's stall watchdog, a stop, the
  turn's timeout - stops the CLI's whole process group (SIGTERM, then SIGKILL `kill_grace`
  later). The idle-output watchdog is the loop's: the turn's stall cap.

The CLI runs its own tools (shown as `NativeToolCall`/`NativeToolResult`); ator's tools are
not offered to it. Its prompt is one text (`render_prompt`): the system blocks the single
prompt context manager made, then the messages.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ator.errors import ProviderError
from ator.providers.base import (
    KEEPALIVE,
    MessageStop,
    ModelRequest,
    StreamEvent,
    UsageUpdate,
)
from ator.providers.cli.process import CliProcess

__all__ = ["CliRun", "StreamParser", "render_prompt", "run_cli"]

_SNIPPET = 120


class StreamParser(Protocol):
    @property
    def finished(self) -> bool: ...

    def feed(self, obj: dict[str, Any]) -> list[StreamEvent]: ...

    def end(self) -> tuple[list[StreamEvent], ProviderError | None]: ...


@dataclass(frozen=True, slots=True)
class CliRun:
    """Everything one run needs: argv (never a shell line), cwd, environment, limits."""

    argv: Sequence[str]
    cwd: Path
    env: Mapping[str, str]
    prompt: str
    line_limit: int
    after_result: float
    kill_grace: float


async def run_cli(run: CliRun, parser: StreamParser) -> AsyncIterator[StreamEvent]:
    proc = await CliProcess.start(run.argv, cwd=run.cwd, env=run.env,
                                  stdin=run.prompt.encode(), line_limit=run.line_limit)
    try:
        while not parser.finished:
            line = await proc.readline()
            if line is None:
                break
            if not line.strip():
                yield KEEPALIVE
                continue
            for event in parser.feed(_object(line)):
                yield event
        code = await proc.wait(run.after_result)
        if code is None:  # alive after its end (or after closing its output): stopped
            await proc.stop(run.kill_grace)
        events, error = parser.end()
        if error is None and not proc.stopped and proc.returncode not in (0, None):
            error = ProviderError(_exited(proc), kind="cli_exit")
        elif error is not None and error.kind == "cli_no_result" and proc.returncode:
            error = ProviderError(f"{error.message}; {_exited(proc)}", kind="cli_no_result")
        for event in events:
            # A call that ends in an error is billed at what it reported, not finished.
            if error is not None and isinstance(event, MessageStop):
                event = UsageUpdate(event.usage, cost_usd=event.cost_usd, model=event.model)
            yield event
        if error is not None:
            raise error
    finally:
        await proc.stop(run.kill_grace)


def _object(line: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        shown = line[:_SNIPPET].decode("utf-8", "replace")
        raise ProviderError(f"the CLI wrote a line that is not a JSON object: {shown!r}",
                            kind="cli_bad_output")
    return obj


def _exited(proc: CliProcess) -> str:
    tail = proc.stderr_tail
    return f"the CLI exited with status {proc.returncode}" + (f": {tail[-500:]}" if tail
                                                              else "")


def render_prompt(request: ModelRequest) -> str:
    """The one prompt a CLI gets: the system blocks, then the messages' text (a single user
    message as it is; more than one labelled by role)."""
    parts = [block.text for block in request.system if block.text.strip()]
    messages = [m for m in request.messages if _text(m)]
    if len(messages) == 1 and messages[0].get("role") == "user":
        parts.append(_text(messages[0]))
    else:
        parts.extend(f"[{m.get('role')}]\n{_text(m)}" for m in messages)
    return "\n\n".join(parts) + "\n"


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content or []
                     if isinstance(b, dict) and b.get("type") == "text" and b.get("text"))
