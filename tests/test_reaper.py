"""Recovery: the reaper's sweep of mailbox items no pump picked up, a turn whose lease is taken
away while it runs, and a turn whose owner stopped heartbeating.

Timings are short (lease TTL well under a second, reaper every 0.1 s) and every wait is on an
event with a deadline.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

from ator.engine.actor import lease_key
from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage
from ator.store import mailbox as mailbox_store
from tests.conftest import ended, new_thread, wait_for_event


class HangsFirst:
    """With `hang`, the first call hangs (after one delta) until cancelled; every other call
    echoes the user's last words."""

    name = "hangs-first"

    def __init__(self, *, hang: bool = True) -> None:
        self.hang = hang
        self.entered = asyncio.Event()
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        if self.hang and len(self.requests) == 1:
            yield TextDelta("thinking it over")
            self.entered.set()
            await asyncio.Event().wait()
        last = request.messages[-1]
        said = " | ".join(b["text"] for b in last["content"] if b["type"] == "text")
        yield TextDelta(f"heard: {said}")
        yield MessageStop("end_turn", Usage(2, 2), request.model)


async def test_the_reaper_runs_a_mailbox_item_that_no_pump_picked_up(make_ator) -> None:
    provider = HangsFirst(hang=False)
    async with make_ator(providers={"hangs-first": provider}, lease_ttl=0.5,
                         reaper_interval=0.1) as ator:
        scope, thread = await new_thread(ator, "hangs-first")
        # What a replica that died between its INSERT and its wake leaves behind: an item in
        # the mailbox, no mark, no pump.
        item, created = await mailbox_store.submit(
            ator.db, scope, thread.id, client_message_id=f"orphan-{uuid.uuid4().hex[:6]}",
            kind="message", content={"role": "user",
                                     "content": [{"type": "text", "text": "orphaned"}]},
        )
        assert created
        end = await wait_for_event(ator, scope, thread.id, ended, timeout=5)
        assert end.data["stop_reason"] == "end_turn"
        events = await ator.events(scope, thread.id)
        [message] = [e for e in events if e.kind == "message"]
        assert message.data["mailbox_id"] == str(item.id)
        assert message.turn_id == uuid.UUID(end.data["turn_id"])
        replies = [b["text"] for e in events if e.kind == "assistant"
                   for b in e.data["content"] if b["type"] == "text"]
        assert replies == ["heard: orphaned"]
        # Ran once: the sweep does not pick an item up again after its turn took it.
        assert len(await ator.turns(scope, thread.id)) == 1


async def test_a_turn_whose_lease_is_taken_away_ends_as_lost_with_a_message(make_ator) -> None:
    provider = HangsFirst()
    ttl = 0.6
    async with make_ator(providers={"hangs-first": provider}, lease_ttl=ttl,
                         reaper_interval=0.1) as ator:
        scope, thread = await new_thread(ator, "hangs-first")
        await ator.submit(scope, thread.id, "long job")
        await asyncio.wait_for(provider.entered.wait(), 5)

        # Another owner takes the thread's lease (as after a partition and an expiry).
        key = lease_key(thread.id)
        owner = await ator.coord.holder(key)
        assert owner is not None
        assert await ator.coord.release(key, owner)
        assert await ator.coord.acquire(key, "thief", 30)
        taken = time.monotonic()

        end = await wait_for_event(ator, scope, thread.id, ended, timeout=5)
        assert time.monotonic() - taken < 3 * ttl  # noticed by the next heartbeat or two
        assert end.data["stop_reason"] == "error:lost"
        assert isinstance(end.data.get("error"), str) and end.data["error"]
        turn = await ator.turn(scope, uuid.UUID(end.data["turn_id"]))
        assert turn.stop_reason == "error:lost" and turn.error
        # The provider call was abandoned: nothing after the first call happened.
        assert len(provider.requests) == 1

        # Once the other owner lets go, the thread works again.
        assert await ator.coord.release(key, "thief")
        result = await ator.ask(scope, thread.id, "still there?", timeout=5)
        assert result.stop_reason == "end_turn"
        assert result.text.startswith("heard: ") and result.text.endswith("still there?")


async def test_a_turn_closed_by_the_reaper_says_why_in_its_end_event(make_ator) -> None:
    provider = HangsFirst()
    # The owner heartbeats every 10 s (TTL 30); the survivor's reaper gives up after 0.5 s:
    # to the survivor, the owner looks dead.
    async with make_ator(providers={"hangs-first": provider}, lease_ttl=30,
                         reaper_interval=60) as owner, \
            make_ator(providers={"hangs-first": provider}, lease_ttl=0.5,
                      reaper_interval=0.1) as survivor:
        scope, thread = await new_thread(owner, "hangs-first")
        await owner.submit(scope, thread.id, "work")
        await asyncio.wait_for(provider.entered.wait(), 5)

        end = await wait_for_event(survivor, scope, thread.id, ended, timeout=5)
        assert end.data["stop_reason"] == "error:lost"
        turn = await survivor.turn(scope, uuid.UUID(end.data["turn_id"]))
        assert turn.stop_reason == "error:lost" and turn.error
        assert isinstance(end.data.get("error"), str) and end.data["error"]
