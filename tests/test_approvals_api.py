"""Approvals over HTTP and the socket (in-process app, a real uvicorn server for sockets, real
PostgreSQL): members decide, viewers read and get 403, another org's action is the plain 404,
problem codes for a decided action and edited arguments; the `decide` command is acked like
the other commands and the org room hears the held call and the decision."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import socketio  # type: ignore[import-untyped]

from ator.api.app import create_app
from ator.engine.approvals import Approvals
from ator.store.scope import Scope
from tests.approval_bank import Bank, agents_for_bank, held, next_end, thread_for
from tests.realtime_util import member_key, serve


def _http(app: Any, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ator",
                             headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _code(r: httpx.Response) -> tuple[int, str | None]:
    body = r.json() if r.headers.get("content-type", "").startswith("application/") else {}
    return r.status_code, body.get("code") if isinstance(body, dict) else None


async def test_members_decide_viewers_read_and_other_orgs_get_404(make_ator) -> None:
    bank, agents = Bank(), agents_for_bank()
    async with make_ator(providers={"agents": agents}, tools=bank.tools()) as a:
        app = create_app(a.settings, runtime=a)
        app.state.ator = a
        scope, thread = await thread_for(a)
        action = await held(a, scope, thread.id)
        _, second = await _thread_in(a, scope)
        other = Scope((await a.create_org("other")).id)
        async with _http(app, await member_key(a, scope)) as member, \
                _http(app, await member_key(a, scope, "viewer")) as viewer, \
                _http(app, await member_key(a, scope, "admin")) as admin, \
                _http(app, await member_key(a, other)) as outsider:
            first = await viewer.get("/v1/approvals", params={"limit": 1})
            assert first.status_code == 200
            assert [x["id"] for x in first.json()["data"]] == [str(action.id)]
            rest = await viewer.get("/v1/approvals",
                                    params={"limit": 1, "cursor": first.json()["next_cursor"]})
            assert [x["id"] for x in rest.json()["data"]] == [str(second.id)]
            assert rest.json()["next_cursor"] is None
            assert _code(await viewer.get("/v1/approvals", params={"cursor": "nope"})) == (
                422, "invalid_cursor")
            got = (await viewer.get(f"/v1/approvals/{action.id}")).json()
            assert (got["status"], got["name"], got["arguments"]) == (
                "pending", "transfer", {"amount": 5})

            decision = f"/v1/approvals/{action.id}/decision"
            assert _code(await viewer.post(decision, json={"decision": "approve"})) == (
                403, "forbidden")
            assert _code(await outsider.post(decision, json={"decision": "approve"})) == (
                404, "not_found")
            assert _code(await outsider.get(f"/v1/approvals/{action.id}")) == (404, "not_found")
            assert (await outsider.get("/v1/approvals")).json()["data"] == []
            assert _code(await member.post(decision, json={"decision": "maybe"}))[0] == 422
            assert _code(await member.post(decision, json={
                "decision": "deny", "arguments": {"amount": 1}})) == (422, "invalid_decision")
            assert _code(await member.post(decision, json={
                "decision": "approve", "arguments": {"amount": "x"}})) == (
                422, "invalid_arguments")
            ok = await member.post(decision, json={"decision": "approve",
                                                   "arguments": {"amount": 7}})
            assert ok.status_code == 200, ok.text
            assert (ok.json()["status"], ok.json()["decided_arguments"]) == (
                "approved", {"amount": 7})
            assert _code(await member.post(decision, json={"decision": "deny"})) == (
                409, "approval_decided")
            await next_end(a, scope, thread.id)
            assert bank.transfers == [7]
            audit = (await viewer.get(f"/v1/approvals/{action.id}")).json()
            assert audit["decided_by"] is not None and audit["executed_at"] is not None
            assert (audit["arguments"], audit["decided_arguments"]) == (
                {"amount": 5}, {"amount": 7})

            assert _code(await member.put("/v1/approvals/settings",
                                          json={"approve_mcp_writes": True})) == (
                403, "forbidden")
            put = await admin.put("/v1/approvals/settings", json={"approve_mcp_writes": True})
            assert put.json() == {"approve_mcp_writes": True}
            assert (await viewer.get("/v1/approvals/settings")).json() == {
                "approve_mcp_writes": True}
            assert (await outsider.get("/v1/approvals/settings")).json() == {
                "approve_mcp_writes": False}


async def _thread_in(a: Any, scope: Scope) -> tuple[Any, Any]:
    """A second held call in the same org (another setup and thread)."""
    setup = await a.create_setup(scope, name="s2", provider="agents", model="scripted",
                                 tool_policy={"approve": ["transfer"]})
    thread = await a.create_thread(scope, setup.id)
    result = await a.ask(scope, thread.id, "pay again", timeout=30)
    assert result.status == "waiting"
    pending = (await a.service(Approvals).pending(scope)).actions
    assert len(pending) == 2
    return thread, pending[1]


class Frames:
    def __init__(self) -> None:
        self.sio = socketio.AsyncClient(reconnection=False)
        self.frames: list[dict[str, Any]] = []
        self._changed = asyncio.Event()
        self.sio.on("frame", self._frame)

    async def _frame(self, frame: dict[str, Any]) -> None:
        self.frames.append(frame)
        self._changed.set()

    async def until(self, test: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        async with asyncio.timeout(15):
            while True:
                found = next((f for f in self.frames if test(f)), None)
                if found is not None:
                    return found
                self._changed.clear()
                await self._changed.wait()


async def test_the_decide_command_is_acked_and_the_org_room_hears_it(make_ator) -> None:
    bank, agents = Bank(), agents_for_bank()
    async with make_ator(providers={"agents": agents}, tools=bank.tools(),
                         rate_limit_per_minute=0) as a:
        app = create_app(a.settings, runtime=a)
        app.state.ator = a
        app.state.sockets.attach(a)
        scope, thread = await thread_for(a)
        watcher, member = Frames(), Frames()
        try:
            async with serve(app) as base:
                await watcher.sio.connect(base, transports=["websocket"], wait_timeout=10,
                                          auth={"key": await member_key(a, scope, "viewer")})
                await member.sio.connect(base, transports=["websocket"], wait_timeout=10,
                                         auth={"key": await member_key(a, scope)})
                action = await held(a, scope, thread.id)
                ended = await watcher.until(lambda f: f["type"] == "turn.ended")
                assert ended["data"]["status"] == "waiting"
                assert ended["data"]["held"][0]["action_id"] == str(action.id)
                refused = await watcher.sio.call("decide", {
                    "approval_id": str(action.id), "decision": "approve"}, timeout=10)
                assert (refused["ok"], refused["error"]["code"]) == (False, "forbidden")
                bad = await member.sio.call("decide", {"approval_id": "x",
                                                       "decision": "approve"}, timeout=10)
                assert bad["error"]["code"] == "invalid_command"
                missing = await member.sio.call("decide", {
                    "approval_id": str(uuid.uuid4()), "decision": "deny"}, timeout=10)
                assert missing["error"]["code"] == "not_found"
                ack = await member.sio.call("decide", {
                    "approval_id": str(action.id), "decision": "deny",
                    "reason": "no"}, timeout=10)
                assert ack["ok"] and ack["approval"]["status"] == "denied", ack
                decided = await watcher.until(lambda f: f["type"] == "approval.decided")
                assert (decided["data"]["id"], decided["data"]["status"]) == (
                    str(action.id), "denied")
                again = await member.sio.call("decide", {
                    "approval_id": str(action.id), "decision": "approve"}, timeout=10)
                assert again["error"]["code"] == "approval_decided"
                end = await next_end(a, scope, thread.id)
                assert end.data["status"] == "done" and bank.transfers == []
                await watcher.sio.disconnect()
                await member.sio.disconnect()
        finally:
            await app.state.sockets.close()
