"""The edge's limits in isolation: the body-limit ASGI middleware driven with raw ASGI
messages (so what the wrapped app receives is observed, not assumed), and the wait slots."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from ator.api.limits import BodyLimit, TooManyWaits, WaitSlots

LIMIT = 1000


class Inner:
    """An app that reads the whole body, then answers 200 with how much it got."""

    def __init__(self) -> None:
        self.called = False
        self.received = 0
        self.disconnected = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.called = True
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                break
            self.received += len(message.get("body", b""))
            if not message.get("more_body", False):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(self.received).encode()})


def http_scope(headers: dict[str, str]) -> Scope:
    return {"type": "http", "method": "POST", "path": "/v1/threads", "headers": [
        (k.lower().encode(), v.encode()) for k, v in headers.items()]}


async def drive(headers: dict[str, str], chunks: list[bytes]
                ) -> tuple[Inner, list[Message], int]:
    """Run BodyLimit(Inner) on a body sent in `chunks`; returns the app, what the client
    got, and how many chunks were pulled from the client."""
    inner = Inner()
    sent: list[Message] = []
    pulled = 0

    async def receive() -> Message:
        nonlocal pulled
        if pulled == len(chunks):
            return {"type": "http.disconnect"}
        pulled += 1
        return {"type": "http.request", "body": chunks[pulled - 1],
                "more_body": pulled < len(chunks)}

    async def send(message: Message) -> None:
        sent.append(message)

    await BodyLimit(inner, max_bytes=LIMIT)(http_scope(headers), receive, send)
    return inner, sent, pulled


def answer(sent: list[Message]) -> tuple[int, dict[str, str], Any]:
    start = [m for m in sent if m["type"] == "http.response.start"]
    assert len(start) == 1, sent
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    headers = {k.decode(): v.decode() for k, v in start[0]["headers"]}
    is_json = headers.get("content-type", "").endswith("json")
    return start[0]["status"], headers, json.loads(body) if is_json else body


async def test_a_declared_length_over_the_limit_is_refused_before_the_app_runs() -> None:
    inner, sent, pulled = await drive({"content-length": str(200 * 1024 * 1024)}, [b"x" * 10])
    status, headers, problem = answer(sent)
    assert (status, headers["content-type"]) == (413, "application/problem+json")
    assert problem["code"] == "payload_too_large" and problem["limit"] == LIMIT
    assert {"type", "title", "status", "detail"} <= problem.keys()
    assert not inner.called and pulled == 0  # nothing read, nothing routed or authenticated


async def test_a_chunked_body_is_cut_at_the_limit_and_never_reaches_the_app_whole() -> None:
    chunks = [b"x" * 300] * 100  # 30 kB in 300-byte pieces, no declared length
    inner, sent, pulled = await drive({"transfer-encoding": "chunked"}, chunks)
    status, _, problem = answer(sent)  # only the 413: the app's own answer was dropped
    assert status == 413 and problem["code"] == "payload_too_large"
    assert inner.disconnected and inner.received <= LIMIT
    assert pulled == 4  # stopped pulling at the first chunk over the limit


async def test_a_body_within_the_limit_passes_untouched() -> None:
    for headers, chunks in (({"content-length": str(LIMIT)}, [b"x" * 600, b"y" * 400]),
                            ({}, [b"z" * LIMIT])):
        inner, sent, _ = await drive(headers, chunks)
        assert answer(sent)[0] == 200 and inner.received == LIMIT and not inner.disconnected


async def test_a_content_length_that_is_not_a_number_is_a_400() -> None:
    inner, sent, _ = await drive({"content-length": "12abc"}, [b"x"])
    status, _, problem = answer(sent)
    assert (status, problem["code"]) == (400, "bad_request") and not inner.called


async def test_other_scopes_pass_through() -> None:
    seen: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["type"])

    async def never() -> Message:
        raise AssertionError("not read")

    async def ignore(message: Message) -> None:
        raise AssertionError("not sent")

    await BodyLimit(app, max_bytes=1)({"type": "lifespan"}, never, ignore)
    assert seen == ["lifespan"]


def test_wait_slots_cap_each_user_and_each_org_and_free_on_any_exit() -> None:
    slots = WaitSlots(per_user=2, per_org=3)
    org, other_org = uuid.uuid4(), uuid.uuid4()
    alice, bob, carol, dave = (uuid.uuid4() for _ in range(4))
    with slots.hold(org, alice), slots.hold(org, alice):
        with pytest.raises(TooManyWaits) as user_capped:
            slots.hold(org, alice).__enter__()
        assert "user" in str(user_capped.value) and user_capped.value.status == 429
        assert user_capped.value.code == "too_many_waits"
        with slots.hold(org, bob):
            with pytest.raises(TooManyWaits) as org_capped:
                slots.hold(org, carol).__enter__()
            assert "org" in str(org_capped.value)
            with slots.hold(other_org, dave):  # another org is not affected
                assert slots.held(other_org) == 1
        assert slots.held(org) == 2 and slots.held(org, alice) == 2
    with pytest.raises(RuntimeError), slots.hold(org, alice):
        raise RuntimeError("the wait failed")
    assert slots.held(org) == 0 and slots.held(org, alice) == 0
    assert slots._users == {} and slots._orgs == {}  # nothing kept for idle users
