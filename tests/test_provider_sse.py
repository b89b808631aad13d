"""The SSE data reader the OpenAI adapter streams through (providers/sse.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ator.providers.sse import data_events

STREAM = (b": keepalive\n\ndata: {\"a\": 1}\n\nevent: chunk\nid: 7\ndata: {\"b\":\ndata: 2}\n\n"
          b"data:no-space\r\n\r\ndata: cr\r\rdata: [DONE]\n\n")
EXPECTED = [b'{"a": 1}', b'{"b":\n2}', b"no-space", b"cr", b"[DONE]"]


async def _chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


async def _read(data: bytes, size: int) -> list[bytes]:
    return [event async for event in data_events(_chunks(data, size))]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
async def test_every_event_s_data_arrives_whatever_the_chunking(size: int) -> None:
    # Every split point is tried with size 1: a CRLF or a field cut in two included.
    assert await _read(STREAM, size) == EXPECTED


async def test_an_event_still_open_at_the_end_is_dispatched() -> None:
    assert await _read(b"data: one\n\ndata: last", 4) == [b"one", b"last"]
    assert await _read(b"data: last\r", 3) == [b"last"]


async def test_comments_names_and_empty_events_give_nothing() -> None:
    assert await _read(b": ping\n\nevent: x\n\n\n\nretry: 5\n\n", 5) == []
