"""Server-sent events, read for their data only (layer: providers; imports nothing of ator).

What the Chat Completions stream needs of SSE: each event's `data` (its data lines joined by
newlines), in order. Event names, ids and retry hints are not used by that API and are
skipped, as are comments (keepalives). Lines may end in CRLF, LF or CR, and a line may be
split across network chunks. The SDK's own decoder builds an object per event and decodes it
with the standard library's JSON; on a long stream that was a tenth of a streamed turn's CPU
(bench/scale.py under py-spy), so the adapter reads the bytes with this instead.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

__all__ = ["data_events"]


async def data_events(chunks: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    """The data of every event in `chunks` (bytes, possibly empty); an event still open when
    the stream ends is dispatched, as a truncated stream's last event may be all there is."""
    pending = b""
    data: list[bytes] = []
    async for chunk in chunks:
        if not chunk:
            continue
        pending += chunk
        if b"\r" in pending:
            # CR alone ends a line too; a CR at the very end may be the first half of a CRLF.
            tail = b"\r" if pending.endswith(b"\r") else b""
            pending = pending[:len(pending) - len(tail)].replace(b"\r\n", b"\n") \
                .replace(b"\r", b"\n") + tail
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if not line:
                if data:
                    yield b"\n".join(data)
                    data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
    if pending.startswith(b"data:"):
        value = pending.rstrip(b"\r")[5:]
        data.append(value[1:] if value.startswith(b" ") else value)
    if data:
        yield b"\n".join(data)
