"""A thin HTTP client for driving `ator serve` the way a user's program would (layer: tests;
imports httpx only — never ator: end-to-end tests see the server through HTTP alone).

Waiting for a turn is a long-poll on `GET /v1/threads/{id}/events?after_seq=N&wait=S` until a
matching event arrives or a deadline passes; nothing here sleeps.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx

__all__ = ["Client", "ended", "script_setup"]

Event = dict[str, Any]

_LONG_POLL = 10.0  # seconds per long-poll request; the deadline bounds the whole wait


def ended(event: Event) -> bool:
    return bool(event["kind"] == "turn_ended")


def script_setup(*steps: dict[str, Any], name: str | None = None,
                 **config: Any) -> dict[str, Any]:
    """The body of POST /v1/setups for a scripted setup playing `steps`."""
    return {
        "name": name or f"scripted-{uuid.uuid4().hex[:6]}",
        "provider": "scripted",
        "model": "scripted",
        "config": {"script": list(steps), **config},
    }


class Client:
    """An API key on one replica. Methods assert the documented success status."""

    def __init__(self, base_url: str, key: str | None) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.http = httpx.AsyncClient(base_url=base_url, headers=headers,
                                      timeout=httpx.Timeout(_LONG_POLL + 20.0))

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return await self.http.request(method, path, **kwargs)

    async def ok(self, method: str, path: str, status: int = 200, **kwargs: Any) -> Any:
        response = await self.http.request(method, path, **kwargs)
        assert response.status_code == status, (
            f"{method} {path} -> {response.status_code} (wanted {status}): {response.text}"
        )
        return response.json() if response.content else None

    # Resources -----------------------------------------------------------------------------

    async def create_setup(self, body: dict[str, Any]) -> dict[str, Any]:
        setup: dict[str, Any] = await self.ok("POST", "/v1/setups", 201, json=body)
        return setup

    async def create_thread(self, setup_id: str, **fields: Any) -> dict[str, Any]:
        thread: dict[str, Any] = await self.ok("POST", "/v1/threads", 201,
                                               json={"setup_id": setup_id, **fields})
        return thread

    async def post_message(self, thread_id: str, text: str,
                           client_message_id: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"text": text}
        if client_message_id is not None:
            body["client_message_id"] = client_message_id
        item: dict[str, Any] = await self.ok("POST", f"/v1/threads/{thread_id}/messages", 202,
                                             json=body)
        return item

    async def thread(self, thread_id: str) -> dict[str, Any]:
        thread: dict[str, Any] = await self.ok("GET", f"/v1/threads/{thread_id}")
        return thread

    async def events(self, thread_id: str, after_seq: int = 0) -> list[Event]:
        page = await self.ok("GET", f"/v1/threads/{thread_id}/events",
                             params={"after_seq": after_seq, "limit": 1000})
        return _records(page["data"])

    async def turns(self, thread_id: str) -> list[dict[str, Any]]:
        page = await self.ok("GET", f"/v1/threads/{thread_id}/turns")
        turns: list[dict[str, Any]] = page["data"]
        return turns

    # Waiting -------------------------------------------------------------------------------

    async def poll(self, thread_id: str, after_seq: int, wait: float) -> list[Event]:
        """One long-poll: events after `after_seq`, or [] when `wait` seconds pass first."""
        page = await self.ok("GET", f"/v1/threads/{thread_id}/events",
                             params={"after_seq": after_seq, "wait": wait, "limit": 1000})
        return _records(page["data"])

    async def follow(
        self,
        thread_id: str,
        until: Callable[[Event], bool] = ended,
        *,
        after_seq: int = 0,
        timeout: float = 30.0,
    ) -> list[Event]:
        """Long-poll the thread's events until one satisfies `until`; returns every event
        seen after `after_seq`, up to and including that one. Fails after `timeout`."""
        deadline = time.monotonic() + timeout
        seen: list[Event] = []
        seq = after_seq
        while (left := deadline - time.monotonic()) > 0:
            for event in await self.poll(thread_id, seq, min(left, _LONG_POLL)):
                seq = event["seq"]
                seen.append(event)
                if until(event):
                    return seen
        kinds = [e["kind"] for e in seen]
        raise AssertionError(f"no matching event within {timeout:g}s; saw {kinds}")


def _records(frames: list[dict[str, Any]]) -> list[Event]:
    """The event records of a page of frames (`{v, seq, type, data}`, engine/wire.py)."""
    assert all(f["v"] == 1 and f["type"] == f["data"]["kind"] for f in frames), frames
    return [f["data"] for f in frames]
