"""The socket gateway on a real server (uvicorn on loopback, python-socketio clients over
WebSocket, real PostgreSQL): auth at connect, server-side rooms after an ownership check,
`join` with after_seq replaying exactly what was missed then live, acknowledged commands with
problem codes, token deltas, org-room pushes, limits, a socket that stops reading; and two
replicas on Redis."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest
import socketio  # type: ignore[import-untyped]

from ator import Ator, Scope
from ator.api.app import create_app
from ator.engine.access import Access
from ator.realtime.connection import org_room
from ator.store import keys as key_store
from tests.conftest import REDIS_URL, ended, new_thread, until, wait_for_event
from tests.realtime_util import Client, Gated, append_notes, member_key, serve


@asynccontextmanager
async def replica(make_ator: Any, gated: Gated, **overrides: Any
                  ) -> AsyncIterator[tuple[str, Ator, Any]]:
    async with make_ator(providers={"gated": gated}, rate_limit_per_minute=0,
                         **overrides) as runtime:
        app = create_app(runtime.settings, runtime=runtime)
        app.state.ator = runtime
        app.state.sockets.attach(runtime)
        try:
            async with serve(app) as base:
                yield base, runtime, app.state.sockets
        finally:
            await app.state.sockets.close()


@asynccontextmanager
async def replica_pair(make_ator: Any, gated: Gated) -> AsyncIterator[
        tuple[tuple[str, Ator, Any], tuple[str, Ator, Any]]]:
    """Replicas A and B on one Redis prefix; B runs no turns, so whatever B's sockets get of
    a turn crossed from A through Redis."""
    prefix = f"ator-test-rt-{uuid.uuid4().hex[:8]}:"
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(
            replica(make_ator, gated, redis_url=REDIS_URL, redis_prefix=prefix))
        b = await stack.enter_async_context(
            replica(make_ator, gated, redis_url=REDIS_URL, redis_prefix=prefix, engine=False))
        yield a, b


@pytest.fixture
async def clients() -> AsyncIterator[Callable[[], Client]]:
    made: list[Client] = []

    def make() -> Client:
        made.append(Client())
        return made[-1]

    yield make
    for c in made:
        if c.sio.connected:
            await c.sio.disconnect()


@pytest.fixture
async def one(make_ator: Any) -> AsyncIterator[tuple[str, Ator, Gated, Any]]:
    gated = Gated(pieces=3)
    async with replica(make_ator, gated, max_socket_rooms=2, max_sockets_per_user=2
                       ) as (b, a, gw):
        yield b, a, gated, gw


async def test_a_key_is_required_and_checked_at_connect(one: Any, clients: Any) -> None:
    base, _ator, _, _ = one
    for key in (None, "ator_00000000_nope"):
        client = clients()
        with pytest.raises(socketio.exceptions.ConnectionError):
            await client.connect(base, key)
        assert client.refused["data"]["code"] == "unauthenticated", client.refused


async def test_rejoin_after_500_missed_frames_gets_exactly_those_then_live(
    one: Any, clients: Any
) -> None:
    base, ator, _, _ = one
    scope, thread = await new_thread(ator, "gated")
    key = await member_key(ator, scope, "viewer")
    await append_notes(ator, scope, thread.id, [f"seen{i}" for i in range(20)])
    client = clients()
    await client.connect(base, key)
    assert (await client.call("join", thread_id=str(thread.id)))["ok"] is True
    await client.until(lambda f: len(f) >= 20)
    await client.sio.disconnect()
    # 500 frames committed while the client is away (in batches, as turns write them)
    for start in range(0, 500, 50):
        await append_notes(ator, scope, thread.id, [f"missed{i}" for i in range(start,
                                                                                start + 50)])
    again = clients()
    await again.connect(base, key)
    ack = await again.call("join", thread_id=str(thread.id), after_seq=20)
    assert ack == {"ok": True, "thread_id": str(thread.id), "after_seq": 20,
                   "room": f"thread:{thread.id}"}
    frames = await again.until(lambda f: len(f) >= 500)
    assert [f["seq"] for f in frames] == list(range(21, 521))
    assert [f["data"]["data"]["text"] for f in frames] == [f"missed{i}" for i in range(500)]
    assert all(set(f) == {"v", "seq", "type", "data"} and f["v"] == 1 for f in frames)
    await append_notes(ator, scope, thread.id, ["live"])
    frames = await again.until(lambda f: len(f) >= 501)
    assert [f["seq"] for f in frames[500:]] == [521]


async def test_another_orgs_thread_is_refused_and_roles_hold(one: Any, clients: Any) -> None:
    base, ator, _, _ = one
    scope, thread = await new_thread(ator, "gated")
    other_scope, _ = await new_thread(ator, "gated")
    stranger = clients()
    await stranger.connect(base, await member_key(ator, other_scope))
    for command in ("join", "send", "stop"):
        ack = await stranger.call(command, thread_id=str(thread.id), text="hi")
        assert ack["ok"] is False and ack["error"]["code"] == "not_found", (command, ack)
    assert stranger.frames == []
    viewer = clients()
    await viewer.connect(base, await member_key(ator, scope, "viewer"))
    ack = await viewer.call("send", thread_id=str(thread.id), text="hi")
    assert (ack["ok"], ack["error"]["code"]) == (False, "forbidden")
    ack = await viewer.call("join", thread_id="not-a-uuid")
    assert (ack["ok"], ack["error"]["code"]) == (False, "invalid_command")
    ack = await viewer.call("join", thread_id=str(thread.id), after_seq=-1)
    assert (ack["ok"], ack["error"]["code"]) == (False, "invalid_cursor")


async def test_send_streams_deltas_and_pushes_busy_and_idle_to_the_org_room(
    one: Any, clients: Any
) -> None:
    base, ator, gated, _ = one
    scope, thread = await new_thread(ator, "gated")
    key = await member_key(ator, scope)
    chat, lobby = clients(), clients()
    await chat.connect(base, key)
    await lobby.connect(base, await member_key(ator, scope, "viewer"))  # joined no thread
    assert (await chat.call("join", thread_id=str(thread.id)))["ok"]
    ack = await chat.call("send", thread_id=str(thread.id), text="hello",
                          client_message_id="m-1")
    assert ack["ok"] and ack["item"]["created"] is True
    again = await chat.call("send", thread_id=str(thread.id), text="hello",
                            client_message_id="m-1")
    assert again["ok"] and again["item"]["created"] is False
    assert again["item"]["id"] == ack["item"]["id"]
    started = next(x for x in await lobby.until(
        lambda f: any(x["type"] == "turn.started" for x in f)) if x["type"] == "turn.started")
    # where the thread sits in its tree (a root: no parent, its own root), for tree views
    assert started["data"]["root_id"] == str(thread.id) and started["data"]["parent_id"] is None
    for i in range(3):  # one piece at a time: each arrives as its own delta frame
        gated.release()
        await chat.until(lambda f, n=i + 1: len([x for x in f if x["type"] == "delta"]) >= n)
    await chat.until(lambda f: any(x["type"] == "turn_ended" for x in f))
    text = "".join(d.get("text", "") for f in chat.of_type("delta")
                   for d in f["data"]["deltas"])
    assert text == "p0 p1 p2 "
    seqs = [f["seq"] for f in chat.persisted()]
    assert seqs == list(range(1, len(seqs) + 1))
    ended = (await lobby.until(lambda f: any(x["type"] == "turn.ended" for x in f)))[-1]
    assert ended["data"]["busy"] is False and ended["data"]["status"] == "done"
    assert ended["data"]["usage"]["output_tokens"] == 3
    assert lobby.persisted() == [] and lobby.of_type("delta") == []
    assert (await chat.call("stop", thread_id=str(thread.id))) == {
        "ok": True, "stop": "idle", "running": False, "descendants": 0}


async def test_limits_on_rooms_and_sockets_and_a_revoked_key(one: Any, clients: Any) -> None:
    base, ator, _, _ = one
    scope, thread = await new_thread(ator, "gated")
    threads = [thread.id] + [(await ator.create_thread(scope, thread.setup_id)).id
                             for _ in range(2)]
    user = uuid.uuid4().hex[:8]
    from ator.store import orgs as org_store

    user_id = await org_store.create_user(ator.db, scope, f"{user}@x", "member")
    record, key = await key_store.create_key(ator.db, scope, user_id=user_id, name="k",
                                             role="member")
    first = clients()
    await first.connect(base, key)
    for t in threads[:2]:
        assert (await first.call("join", thread_id=str(t)))["ok"]
    ack = await first.call("join", thread_id=str(threads[2]))
    assert (ack["ok"], ack["error"]["code"]) == (False, "too_many_rooms")
    assert (await first.call("leave", thread_id=str(threads[0])))["left"] is True
    assert (await first.call("join", thread_id=str(threads[2])))["ok"]
    second = clients()
    await second.connect(base, key)
    third = clients()
    with pytest.raises(socketio.exceptions.ConnectionError):
        await third.connect(base, key)  # a third socket for this user
    assert third.refused["data"]["code"] == "too_many_sockets"
    await ator.service(Access).revoke_key(Scope(scope.org_id), record.id)  # as the API revokes
    ack = await second.call("join", thread_id=str(threads[0]))
    assert (ack["ok"], ack["error"]["code"]) == (False, "unauthenticated")
    await asyncio.wait_for(second.gone.wait(), 10)  # a command with a revoked key ends it
    assert not first.gone.is_set()
    gateway = one[3]
    assert await gateway.recheck() == 1  # the sweep ends the socket that sent nothing
    await asyncio.wait_for(first.gone.wait(), 10)
    assert gateway.connections == 0


async def test_a_turn_started_through_replica_a_reaches_a_socket_on_replica_b(
    make_ator: Any, clients: Any
) -> None:
    gated = Gated(pieces=2)
    async with replica_pair(make_ator, gated) as ((base_a, a, _), (base_b, _, _)):
        scope, thread = await new_thread(a, "gated")
        on_a, on_b, watcher_b = clients(), clients(), clients()
        await on_a.connect(base_a, await member_key(a, scope))
        await on_b.connect(base_b, await member_key(a, scope))
        await watcher_b.connect(base_b, await member_key(a, scope, "viewer"))
        assert (await on_b.call("join", thread_id=str(thread.id)))["ok"]
        ack = await on_a.call("send", thread_id=str(thread.id), text="across")
        assert ack["ok"], ack
        started = await watcher_b.until(lambda f: any(x["type"] == "turn.started" for x in f))
        assert started[0]["data"]["thread_id"] == str(thread.id)
        gated.release(2)
        await on_b.until(lambda f: any(x["type"] == "turn_ended" for x in f))
        text = "".join(d.get("text", "") for f in on_b.of_type("delta")
                       for d in f["data"]["deltas"])
        assert text == "p0 p1 "
        await watcher_b.until(lambda f: any(x["type"] == "turn.ended" for x in f))
        # each push arrives once, although both replicas share the Redis channel
        assert [f["type"] for f in watcher_b.frames] == ["turn.started", "turn.ended"]


async def test_a_burst_of_org_notices_crosses_through_the_coordinator_in_order(
    make_ator: Any, clients: Any
) -> None:
    # socket.io's own Redis client opens a connection for every emit that finds the others
    # busy (a burst of 1,000 turns opened ~700); on a runtime's Redis the manager publishes
    # through the coordinator instead, and B still gets every notice, in order.
    gated = Gated(pieces=1)
    async with replica_pair(make_ator, gated) as ((_, a, gw_a), (base_b, _, _)):
        scope, _ = await new_thread(a, "gated")
        watcher = clients()
        await watcher.connect(base_b, await member_key(a, scope, "viewer"))
        pool = gw_a.sio.manager.redis.connection_pool
        await asyncio.gather(*(gw_a.sio.emit("frame", {"type": "note", "n": n},
                                             room=org_room(scope.org_id)) for n in range(100)))
        await watcher.until(lambda f: len(f) >= 100)
        assert [f["n"] for f in watcher.frames] == list(range(100))
        # Only socket.io's subscription holds a connection of its client.
        assert len(pool._in_use_connections) + len(pool._available_connections) <= 1


async def test_a_socket_that_stops_reading_is_cut_off_and_others_miss_nothing(
    make_ator: Any, clients: Any, monkeypatch: Any
) -> None:
    import json

    import aiohttp

    async with replica(make_ator, Gated(1), socket_outbox_bytes=64 * 1024,
                       socket_slow_timeout=1.0) as (base, ator, gateway):
        scope, thread = await new_thread(ator, "gated")
        key = await member_key(ator, scope)
        dropped = asyncio.Event()
        drop = gateway._drop

        async def observed(sid: str) -> None:
            await drop(sid)
            dropped.set()

        monkeypatch.setattr(gateway, "_drop", observed)
        good = clients()
        await good.connect(base, key)
        assert (await good.call("join", thread_id=str(thread.id)))["ok"]
        async with aiohttp.ClientSession() as http, http.ws_connect(
            base.replace("http", "ws") + "/socket.io/?EIO=4&transport=websocket",
            autoping=False, max_msg_size=0,
        ) as slow:
            assert (await slow.receive_str()).startswith("0")
            await slow.send_str("40" + json.dumps({"key": key}))
            assert (await slow.receive_str()).startswith("40")
            await slow.send_str("421" + json.dumps(["join", {"thread_id": str(thread.id)}]))
            assert (await slow.receive_str()).startswith("431")
            # From here `slow` reads nothing: its buffers fill, then its transport queue.
            big = "x" * 200_000
            for _ in range(15):
                await append_notes(ator, scope, thread.id, [big] * 10)
                if dropped.is_set():
                    break
            await asyncio.wait_for(dropped.wait(), 30)
            assert gateway.connections == 1
            total = (await ator.events(scope, thread.id, after_seq=0, limit=1000))[-1].seq
            frames = await good.until(lambda f: len(f) >= total, timeout=60)
            assert [f["seq"] for f in frames] == list(range(1, total + 1))


async def test_commands_count_against_the_apis_rate_limit(make_ator: Any, clients: Any) -> None:
    async with replica(make_ator, Gated(1)) as (base, ator, _):
        object.__setattr__(ator.settings, "rate_limit_per_minute", 3)
        scope, thread = await new_thread(ator, "gated")
        client = clients()
        await client.connect(base, await member_key(ator, scope))
        answers = [await client.call("stop", thread_id=str(thread.id)) for _ in range(4)]
    assert [a["ok"] for a in answers] == [True, True, True, False]
    assert answers[3]["error"]["code"] == "rate_limited"


async def test_a_feed_outlives_a_lost_coordinator_connection(one: Any, clients: Any) -> None:
    from ator.errors import CoordinationError

    base, ator, _, _ = one
    scope, thread = await new_thread(ator, "gated")
    client = clients()
    await client.connect(base, await member_key(ator, scope))
    assert (await client.call("join", thread_id=str(thread.id)))["ok"]
    await append_notes(ator, scope, thread.id, ["before"])
    await client.until(lambda f: len(f) >= 1)
    ator.coord.hub._lost(CoordinationError("connection reset"))  # every waiter fails
    for i in range(5):  # committed while the feed is down: only the database has them
        await append_notes(ator, scope, thread.id, [f"during{i}"])
    frames = await client.until(lambda f: len(f) >= 6)
    await append_notes(ator, scope, thread.id, ["after"])
    frames = await client.until(lambda f: len(f) >= 7)
    assert [f["seq"] for f in frames] == list(range(1, 8))
    assert [f["data"]["data"]["text"] for f in frames] == [
        "before", *(f"during{i}" for i in range(5)), "after"]


@pytest.mark.parametrize(("text", "cmid", "code"), [
    ("a\x00b", None, "unstorable_value"),
    ("hi", "a\x00b", "unstorable_value"),
    ("hi", "bad id!", "invalid_client_message_id"),
    ("hi", "x" * 201, "invalid_client_message_id"),
    ("hi", "", "invalid_client_message_id"),
    ("hi", 5, "invalid_client_message_id"),
    ("   ", None, "empty_message"),
    ("x" * 100_001, None, "message_too_long"),
], ids=["nul-text", "nul-id", "id-pattern", "id-long", "id-empty", "id-number", "empty",
        "long"])
async def test_send_and_post_refuse_the_same_messages_with_the_same_codes(
        one: Any, clients: Any, text: Any, cmid: Any, code: str) -> None:
    import httpx

    base, ator, _, _ = one
    scope, thread = await new_thread(ator, "gated")
    key = await member_key(ator, scope)
    c = clients()
    await c.connect(base, key)
    body: dict[str, Any] = {"text": text}
    if cmid is not None:
        body["client_message_id"] = cmid
    ack = await c.call("send", thread_id=str(thread.id), **body)
    async with httpx.AsyncClient(base_url=base) as http:
        posted = await http.post(f"/v1/threads/{thread.id}/messages", json=body,
                                 headers={"Authorization": f"Bearer {key}"})
    assert posted.status_code == 422, posted.text
    assert (ack["ok"], ack["error"]["code"]) == (False, code), ack
    assert posted.json()["code"] == code, posted.text
    assert ack["error"]["detail"] == posted.json()["detail"]
    assert await ator.events(scope, thread.id) == []  # nothing was taken in


async def test_an_unknown_event_gets_an_error_ack(one: Any, clients: Any) -> None:
    base, ator, _, _ = one
    scope, thread = await new_thread(ator, "gated")
    c = clients()
    await c.connect(base, await member_key(ator, scope))
    ack = await c.sio.call("sned", {"thread_id": str(thread.id)}, timeout=5)
    assert ack["ok"] is False and ack["error"]["code"] == "unknown_command", ack
    assert "join, leave, send, stop" in ack["error"]["detail"]
    assert (await c.call("join", thread_id=str(thread.id)))["ok"]  # the socket still works


async def test_a_stalled_websocket_is_disconnected_by_the_slow_timeout_under_default_bounds(
    make_ator: Any, clients: Any, monkeypatch: Any
) -> None:
    """Issue 17, D8: the outbox is weighed in bytes and time, not frames. Under the default
    byte bound, a raw WebSocket that stops reading while a turn streams deltas and a few
    MB of big frames is cut within the slow timeout of its stall; another socket on the
    thread gets every frame."""
    import json
    import time

    import aiohttp

    gated = Gated(pieces=40)
    timeout = 1.0
    async with replica(make_ator, gated, socket_slow_timeout=timeout) as (base, ator, gateway):
        scope, thread = await new_thread(ator, "gated")
        key = await member_key(ator, scope)
        dropped = asyncio.Event()
        drop = gateway._drop

        async def observed(sid: str) -> None:
            await drop(sid)
            dropped.set()

        monkeypatch.setattr(gateway, "_drop", observed)
        good = clients()
        await good.connect(base, key)
        assert (await good.call("join", thread_id=str(thread.id)))["ok"]
        async with aiohttp.ClientSession() as http, http.ws_connect(
            base.replace("http", "ws") + "/socket.io/?EIO=4&transport=websocket",
            autoping=False, max_msg_size=0,
        ) as slow:
            assert (await slow.receive_str()).startswith("0")
            await slow.send_str("40" + json.dumps({"key": key}))
            assert (await slow.receive_str()).startswith("40")
            await slow.send_str("421" + json.dumps(["join", {"thread_id": str(thread.id)}]))
            assert (await slow.receive_str()).startswith("431")
            # From here `slow` reads nothing. A turn streams deltas between big frames of
            # 100 KB, far fewer frames than any frame-count bound would notice, until the
            # socket is cut: a stall starts only once the kernel's buffers are full (a few
            # MB on loopback, more on a loaded machine), so how many frames that takes is
            # the machine's; bounded here at 40 MB.
            await ator.submit(scope, thread.id, "go")
            big = "x" * 100_000
            last = time.monotonic()
            for i in range(400):
                await append_notes(ator, scope, thread.id, [f"{i} {big}"])
                if i % 2 and i < 80:
                    gated.release()
                last = time.monotonic()
                if dropped.is_set():
                    break
            gated.release(40)
            async with asyncio.timeout(timeout + 5):
                await dropped.wait()
            assert time.monotonic() - last < timeout + 5
            assert gateway.connections == 1
        await wait_for_event(ator, scope, thread.id, ended)
        total = (await ator.events(scope, thread.id, after_seq=0, limit=1000))[-1].seq
        frames = await good.until(lambda f: len(good.persisted()) >= total, timeout=60)
        assert [f["seq"] for f in good.persisted()] == list(range(1, total + 1))
        assert good.of_type("delta") and frames
        assert good.sio.connected


async def test_a_socket_gone_while_its_join_is_set_up_leaves_no_follow_behind(
    one: Any, clients: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, ator, _, gw = one
    scope, thread = await new_thread(ator, "gated")
    followed, release, done = asyncio.Event(), asyncio.Event(), asyncio.Event()
    follow = gw.feeds.follow

    async def slow_follow(*args: Any, **kwargs: Any) -> Any:
        # The join's follow is set up; the client leaves before the join goes on.
        try:
            made = await follow(*args, **kwargs)
            followed.set()
            await release.wait()
            return made
        finally:
            done.set()

    monkeypatch.setattr(gw.feeds, "follow", slow_follow)
    client = clients()
    await client.connect(base, await member_key(ator, scope))
    await client.sio.emit("join", {"thread_id": str(thread.id)})
    async with asyncio.timeout(10):
        await followed.wait()
        await client.sio.disconnect()
        await until(lambda: not gw._conns)  # the server saw it go (its drop ran)
        release.set()
        await done.wait()
        # Nothing may go on following the thread for a socket that is gone.
        await until(lambda: gw.feeds.count == 0)


async def test_a_websocket_writer_sends_a_burst_in_order_and_ends_with_its_socket(
    one: Any, clients: Any
) -> None:
    """The gateway's WebSocket writer (realtime.outbox) waits without a timer per packet:
    engine.io's sockets must be the gateway's (a newer engine.io that registers them
    another way would silently fall back to the slow path), a burst queued at once arrives
    whole and in order, and the writer ends when the socket goes."""
    from ator.realtime.outbox import _Socket

    base, ator, _, gw = one
    scope, _thread = await new_thread(ator, "gated")
    client = clients()
    await client.connect(base, await member_key(ator, scope))
    (sock,) = list(gw.sio.eio.sockets.values())
    assert type(sock) is _Socket and sock.upgraded
    for i in range(200):
        await gw.sio.emit("frame", {"v": 1, "seq": None, "type": "burst", "data": {"i": i}},
                          to=client.sio.get_sid())
    await client.until(lambda f: len([x for x in f if x["type"] == "burst"]) >= 200)
    assert [x["data"]["i"] for x in client.of_type("burst")] == list(range(200))
    writers = {t for t in asyncio.all_tasks()
               if getattr(t.get_coro(), "__qualname__", "").endswith("<locals>.writer")}
    assert writers
    await client.sio.disconnect()
    await until(lambda: all(t.done() for t in writers), timeout=10)
