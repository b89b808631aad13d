"""Requests first (ator/foreground.py, api/first.py): a turn about to start lets the requests
that hand the process work be answered first, for a bounded time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ator.api.first import RequestsFirst
from ator.foreground import Foreground
from ator.providers.scripted import ScriptedProvider, ScriptStep
from tests.conftest import ended, new_thread, operator_client, until, wait_for_event


async def test_nothing_in_flight_returns_at_once() -> None:
    fg = Foreground(5.0)
    async with asyncio.timeout(0.5):
        await fg.after_requests()


async def test_waits_for_the_last_request_then_goes() -> None:
    fg = Foreground(30.0)
    fg.enter()
    fg.enter()
    waiting = [asyncio.ensure_future(fg.after_requests()) for _ in range(3)]
    await asyncio.sleep(0.05)
    assert not any(w.done() for w in waiting)
    fg.leave()
    await asyncio.sleep(0.05)
    assert not any(w.done() for w in waiting)  # one request is still being answered
    fg.leave()
    async with asyncio.timeout(1):
        await asyncio.gather(*waiting)
    assert fg.in_flight == 0
    # A later burst waits again (the quiet moment was not kept).
    fg.enter()
    again = asyncio.ensure_future(fg.after_requests())
    await asyncio.sleep(0.05)
    assert not again.done()
    fg.leave()
    async with asyncio.timeout(1):
        await again


async def test_a_steady_stream_of_requests_delays_a_turn_by_max_wait_at_most() -> None:
    fg = Foreground(0.2)
    fg.enter()  # never answered
    loop = asyncio.get_running_loop()
    began = loop.time()
    await fg.after_requests()
    assert 0.15 <= loop.time() - began < 2.0
    zero = Foreground(0)
    zero.enter()
    async with asyncio.timeout(0.5):
        await zero.after_requests()  # 0: never waits


class _State:
    ator: Any = None


class _App:
    """An ASGI app that answers after `release` is set, optionally streaming."""

    def __init__(self, fg: Foreground, *, stream: bool = False, fail: bool = False) -> None:
        self.state = _State()
        self.state.ator = type("Runtime", (), {"foreground": fg})()
        self.release = asyncio.Event()
        self.stream = stream
        self.fail = fail
        self.seen: list[int] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        fg = self.state.ator.foreground
        self.seen.append(fg.in_flight)
        if self.fail:
            raise RuntimeError("handler failed")
        if self.stream:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            self.seen.append(fg.in_flight)
            await self.release.wait()
            await send({"type": "http.response.body", "body": b"x"})
            return
        await self.release.wait()
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def _scope(app: _App, method: str, path: str) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "app": app, "headers": []}


async def _call(app: _App, method: str, path: str) -> None:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        pass

    await RequestsFirst(app)(_scope(app, method, path), receive, send)


@pytest.mark.parametrize(("method", "path", "counted"), [
    ("POST", "/v1/threads/0/messages", True),
    ("POST", "/v1/threads", True),
    ("GET", "/v1/threads/0/events", False),  # a long-poll may wait a minute
    ("POST", "/mcp", False),
    ("POST", "/v1/orgs", False),
])
async def test_the_edge_counts_work_handing_posts_until_answered(
    method: str, path: str, counted: bool
) -> None:
    fg = Foreground(30.0)
    app = _App(fg)
    call = asyncio.ensure_future(_call(app, method, path))
    await until(lambda: bool(app.seen))
    assert fg.in_flight == (1 if counted else 0)
    app.release.set()
    await call
    assert fg.in_flight == 0


async def test_a_streamed_answer_leaves_when_it_starts_and_a_failure_leaves_too() -> None:
    fg = Foreground(30.0)
    app = _App(fg, stream=True)
    call = asyncio.ensure_future(_call(app, "POST", "/v1/threads/0/messages"))
    await until(lambda: len(app.seen) == 2)
    assert app.seen == [1, 0]  # counted until its response started, not while it streams
    app.release.set()
    await call
    failing = _App(fg, fail=True)
    with pytest.raises(RuntimeError):
        await _call(failing, "POST", "/v1/threads")
    assert failing.seen == [1] and fg.in_flight == 0


async def test_a_turn_starts_its_model_call_only_after_the_requests_are_answered(
    make_ator: Any,
) -> None:
    provider = ScriptedProvider([ScriptStep(text="ok")], repeat_last=True)
    provider.record_requests = True
    async with make_ator(providers={"s": provider}, requests_first_wait=10.0) as ator:
        scope, thread = await new_thread(ator, "s")
        ator.foreground.enter()  # a request still being answered
        _item, created = await ator.submit(scope, thread.id, "hello")
        assert created  # accepted (durable) while the request is in flight
        await asyncio.sleep(0.3)
        assert provider.requests == []  # the turn exists but waits
        assert [t.status for t in await ator.turns(scope, thread.id)] == ["running"]
        ator.foreground.leave()
        await wait_for_event(ator, scope, thread.id, ended)
        assert len(provider.requests) == 1
        # A stop while the turn waits ends it as stopped, not left running.
        ator.foreground.enter()
        await ator.submit(scope, thread.id, "again")
        await asyncio.sleep(0.3)  # the second turn started and waits
        await ator.stop(scope, thread.id)
        await until_status(ator, scope, thread.id, 2)
        turns = await ator.turns(scope, thread.id)
        assert sorted(t.stop_reason or "" for t in turns) == ["cancelled:user", "end_turn"]
        assert len(provider.requests) == 1  # the stopped turn never called the model
        ator.foreground.leave()


async def until_status(ator: Any, scope: Any, thread_id: Any, n: int) -> None:
    for _ in range(300):
        turns = await ator.turns(scope, thread_id)
        if len(turns) == n and all(t.status != "running" for t in turns):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"turns still running: {[t.status for t in turns]}")


async def test_a_burst_of_posts_is_answered_before_the_turns_call_the_model(
    make_ator: Any,
) -> None:
    """Through the real app: every 202 of a burst is sent before any of the turns it started
    calls the model (the wait is long enough not to expire here)."""
    answered: list[float] = []
    called: list[float] = []
    loop = asyncio.get_running_loop()

    def respond(request: Any) -> ScriptStep:
        called.append(loop.time())
        return ScriptStep(text="ok")

    provider = ScriptedProvider(responder=respond)
    async with operator_client(make_ator, providers={"s": provider},
                               requests_first_wait=10.0) as (client, key, _runtime):
        member = {"Authorization": f"Bearer {key}"}
        setup = await client.post("/v1/setups", json={"name": "s", "provider": "s",
                                                      "model": "scripted"}, headers=member)
        assert setup.status_code == 201, setup.text
        threads = [(await client.post("/v1/threads", json={"setup_id": setup.json()["id"]},
                                      headers=member)).json()["id"] for _ in range(20)]

        async def post(thread_id: str) -> None:
            r = await client.post(f"/v1/threads/{thread_id}/messages", json={"text": "hi"},
                                  headers=member)
            assert r.status_code == 202, r.text
            answered.append(loop.time())

        await asyncio.gather(*(post(t) for t in threads))
        await until(lambda: len(called) == 20, timeout=30)
        assert len(answered) == 20
        assert max(answered) <= min(called)
