"""`GET /v1/threads/{id}/stream` on a real server (uvicorn on loopback, real PostgreSQL): the
frames after the cursor from the database, then live, with no gap and no duplicate at the
seam, resumed by Last-Event-ID; token deltas while a turn streams; another org's thread is
not found."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from ator import Ator
from ator.api.app import create_app
from tests.conftest import new_thread
from tests.realtime_util import Gated, append_notes, member_key, serve


class SSE:
    """Reads one event stream frame by frame."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()

    async def next(self, timeout: float = 10.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            fields: dict[str, str] = {}
            async for line in self._lines:
                if line == "":
                    if "data" in fields:
                        frame: dict[str, Any] = json.loads(fields["data"])
                        frame["_id"] = fields.get("id")
                        frame["_event"] = fields.get("event")
                        return frame
                    fields = {}
                    continue
                if line.startswith(":"):
                    continue
                name, _, value = line.partition(": ")
                fields[name] = value
        raise AssertionError("the stream ended")

    async def persisted(self, n: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while len(out) < n:
            frame = await self.next()
            if frame["seq"] is not None:
                out.append(frame)
        return out


@asynccontextmanager
async def stream(base: str, key: str, thread_id: Any, **headers: str) -> AsyncIterator[SSE]:
    async with httpx.AsyncClient(base_url=base, timeout=30) as client, client.stream(
        "GET", f"/v1/threads/{thread_id}/stream",
        headers={"Authorization": f"Bearer {key}", **headers},
    ) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield SSE(response)


@pytest.fixture
async def served(make_ator: Any) -> AsyncIterator[tuple[str, Ator]]:
    gated = Gated(pieces=4)
    async with make_ator(providers={"gated": gated}, rate_limit_per_minute=0) as runtime:
        app = create_app(runtime.settings, runtime=runtime)
        app.state.ator = runtime
        runtime.gated = gated  # type: ignore[attr-defined]
        async with serve(app) as base:
            yield base, runtime


async def test_resume_replays_after_the_cursor_then_goes_live(served: Any) -> None:
    base, ator = served
    scope, thread = await new_thread(ator, "gated")
    key = await member_key(ator, scope, "viewer")
    await append_notes(ator, scope, thread.id, [f"n{i}" for i in range(1, 31)])
    async with stream(base, key, thread.id, **{"Last-Event-ID": "10"}) as sse:
        replayed = await sse.persisted(20)
        assert [f["seq"] for f in replayed] == list(range(11, 31))
        first = replayed[0]
        assert set(first) - {"_id", "_event"} == {"v", "seq", "type", "data"}
        assert (first["v"], first["type"], first["_id"], first["_event"]) == (1, "note", "11",
                                                                             "note")
        assert first["data"]["data"] == {"text": "n11"}
        assert first["data"]["thread_id"] == str(thread.id)
        await append_notes(ator, scope, thread.id, ["live1", "live2"])
        live = await sse.persisted(2)
    assert [(f["seq"], f["data"]["data"]["text"]) for f in live] == [(31, "live1"),
                                                                     (32, "live2")]


async def test_commits_racing_the_replay_arrive_once_each_in_order(served: Any) -> None:
    base, ator = served
    scope, thread = await new_thread(ator, "gated")
    key = await member_key(ator, scope)
    await append_notes(ator, scope, thread.id, [f"a{i}" for i in range(200)])

    async def writer() -> None:
        for i in range(40):  # commits while the reader subscribes and replays
            await append_notes(ator, scope, thread.id, [f"b{i}", f"c{i}"])

    task = asyncio.create_task(writer())
    async with stream(base, key, thread.id) as sse:
        frames = await sse.persisted(280)
        await task
    assert [f["seq"] for f in frames] == list(range(1, 281))


async def test_a_lost_notice_is_recovered_from_the_database(served: Any) -> None:
    base, ator = served
    scope, thread = await new_thread(ator, "gated")
    key = await member_key(ator, scope)
    async with stream(base, key, thread.id, **{"Last-Event-ID": "0"}) as sse:
        await append_notes(ator, scope, thread.id, ["one"])
        assert [f["seq"] for f in await sse.persisted(1)] == [1]
        await append_notes(ator, scope, thread.id, ["two", "three"], publish=False)
        await append_notes(ator, scope, thread.id, ["four"])  # announces past a gap
        frames = await sse.persisted(3)
    assert [(f["seq"], f["data"]["data"]["text"]) for f in frames] == [
        (2, "two"), (3, "three"), (4, "four")]


async def test_token_deltas_stream_before_the_reply_is_recorded(served: Any) -> None:
    base, ator = served
    scope, thread = await new_thread(ator, "gated")
    key = await member_key(ator, scope)
    async with stream(base, key, thread.id) as sse:
        await ator.submit(scope, thread.id, "hello")
        kinds: list[str] = []
        text = ""
        while "assistant" not in kinds:
            if kinds and kinds[-1] in ("turn_started", "delta"):
                ator.gated.release()  # the next piece only after the last one arrived
            frame = await sse.next()
            kinds.append(frame["type"])
            if frame["type"] == "delta":
                assert frame["seq"] is None and frame["_id"] is None
                text += "".join(d.get("text", "") for d in frame["data"]["deltas"])
        ended = await sse.persisted(1)
    assert text == "p0 p1 p2 p3 "
    assert kinds.count("delta") >= 4  # several increments, not one block
    assert kinds.index("delta") > kinds.index("turn_started")
    assert ended[0]["type"] == "turn_ended"


async def test_another_orgs_thread_is_not_found_and_a_key_is_required(served: Any) -> None:
    base, ator = served
    _, thread = await new_thread(ator, "gated")
    other_scope, _ = await new_thread(ator, "gated")
    other = await member_key(ator, other_scope)
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        r = await client.get(f"/v1/threads/{thread.id}/stream",
                             headers={"Authorization": f"Bearer {other}"})
        assert (r.status_code, r.json()["code"]) == (404, "not_found")
        r = await client.get(f"/v1/threads/{thread.id}/stream")
        assert (r.status_code, r.json()["code"]) == (401, "unauthenticated")
        r = await client.get(f"/v1/threads/{thread.id}/stream",
                             headers={"Authorization": f"Bearer {other}",
                                      "Last-Event-ID": "x"})
        assert (r.status_code, r.json()["code"]) == (422, "invalid_cursor")


async def test_event_pages_long_poll_and_sse_carry_the_same_frames(served: Any) -> None:
    """One frame format for every transport: the event page, the long-poll and the stream
    give the same `{v, seq, type, data}` frames for the same events (the page used to give
    bare event records of its own shape)."""
    base, ator = served
    scope, thread = await new_thread(ator, "gated")
    key = await member_key(ator, scope, "viewer")
    await append_notes(ator, scope, thread.id, ["one", "two"])
    async with httpx.AsyncClient(base_url=base, timeout=30,
                                 headers={"Authorization": f"Bearer {key}"}) as client:
        page = (await client.get(f"/v1/threads/{thread.id}/events")).json()
        waiting = asyncio.create_task(client.get(f"/v1/threads/{thread.id}/events",
                                                 params={"after_seq": 2, "wait": 20}))
        async with stream(base, key, thread.id) as sse:
            replayed = await sse.persisted(2)
            await append_notes(ator, scope, thread.id, ["three"])
            live = await sse.persisted(1)
        polled = (await waiting).json()
    strip = [{k: v for k, v in f.items() if not k.startswith("_")} for f in replayed + live]
    assert page["data"] == strip[:2] and polled["data"] == strip[2:]
    assert polled["last_seq"] == 3
    assert [(f["v"], f["seq"], f["type"], f["data"]["data"]["text"]) for f in strip] == [
        (1, 1, "note", "one"), (1, 2, "note", "two"), (1, 3, "note", "three")]
