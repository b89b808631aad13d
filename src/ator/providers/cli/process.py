"""One run of an agent CLI as a supervised subprocess (layer: providers; imports errors only).

The child starts in a session of its own (`start_new_session`), so it leads a process
group holding everything it spawns (a shell, a test runner): stopping it stops the group.
The prompt is written to stdin, which is then closed (an open stdin can hang a CLI's
start). stdout is read as lines under a size cap (a longer line is an error, not a buffer
grown without bound); stderr is drained in the background, its tail kept for the error.

`stop(grace)` sends SIGTERM to the group, waits up to `grace` seconds for the child, then
sends SIGKILL to the group whatever happened (a child that exited may leave members
behind). It is idempotent, and a cancellation while it waits still ends in SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

from ator.errors import ProviderError

__all__ = ["CliProcess", "LineTooLong"]

_STDERR_TAIL = 4096


class LineTooLong(ProviderError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"the CLI wrote a line over {limit} bytes", kind="cli_line_too_long")


class CliProcess:
    """A started CLI: read `lines()`, then `wait()` or `stop()`."""

    def __init__(self, proc: asyncio.subprocess.Process, line_limit: int, stdin: bytes
                 ) -> None:
        self._proc = proc
        self._limit = line_limit
        self._stderr = bytearray()
        self._drain = asyncio.ensure_future(self._read_stderr())
        self._feed = asyncio.ensure_future(self._write_stdin(stdin))
        self.stopped = False  # ator ended it (its exit status is then not the CLI's verdict)

    @classmethod
    async def start(cls, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str],
                    stdin: bytes, line_limit: int) -> CliProcess:
        """Start `argv` (never through a shell). Raises ProviderError `cli_unavailable`
        when the executable cannot be started."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=cwd, env=dict(env), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True, limit=line_limit)
        except OSError as exc:
            raise ProviderError(f"cannot start {Path(argv[0]).name}: {exc.strerror or exc}",
                                kind="cli_unavailable") from None
        return cls(proc, line_limit, stdin)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    @property
    def stderr_tail(self) -> str:
        return bytes(self._stderr[-_STDERR_TAIL:]).decode("utf-8", "replace").strip()

    async def _write_stdin(self, data: bytes) -> None:
        pipe = self._proc.stdin
        assert pipe is not None
        try:
            pipe.write(data)
            await pipe.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the CLI exited without reading its prompt: its exit status says why
        finally:
            pipe.close()

    async def _read_stderr(self) -> None:
        pipe = self._proc.stderr
        assert pipe is not None
        while chunk := await pipe.read(65536):
            self._stderr += chunk
            if len(self._stderr) > 2 * _STDERR_TAIL:
                del self._stderr[:-_STDERR_TAIL]

    async def readline(self) -> bytes | None:
        """The next stdout line without its newline; None at the end of output. Raises
        LineTooLong for a line over the cap."""
        pipe = self._proc.stdout
        assert pipe is not None
        try:
            line = await pipe.readline()
        except ValueError:  # asyncio's limit overrun: the line is over the cap
            raise LineTooLong(self._limit) from None
        if not line:
            return None
        return line.rstrip(b"\r\n")

    async def wait(self, timeout: float) -> int | None:
        """The exit status, or None if the CLI is still running after `timeout` seconds."""
        try:
            async with asyncio.timeout(timeout):
                return await self._proc.wait()
        except TimeoutError:
            return None

    async def stop(self, grace: float) -> None:
        """SIGTERM the group, wait up to `grace` s, then SIGKILL the group (idempotent)."""
        if self._proc.returncode is None:
            self.stopped = True
            self._signal(signal.SIGTERM)
        try:
            if self._proc.returncode is None:
                await self.wait(grace)
        finally:
            self._signal(signal.SIGKILL)  # members left behind go too, even if it exited
            if self._proc.returncode is None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(grace + 1.0):
                        await self._proc.wait()
            self._feed.cancel()
            self._drain.cancel()

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)
