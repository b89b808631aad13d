"""Org-room notices go out in the background, a chunk of sockets per turn of the event loop,
while a thread room's frames go at once (realtime/managers.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ator.realtime import managers
from ator.realtime.connection import is_org_room, org_room


@dataclass
class _Sock:
    closed: bool = False
    queue: asyncio.Queue[str] = field(default_factory=asyncio.Queue)

    def got(self) -> list[str]:
        out = []
        while not self.queue.empty():
            out.append(self.queue.get_nowait())
        return out


async def _settle(background: managers._Background) -> None:
    for _ in range(10_000):
        if not background._todo:
            return
        await asyncio.sleep(0)
    raise AssertionError("the background deliveries never ended")


async def test_every_socket_gets_every_notice_in_order_a_chunk_per_loop_turn() -> None:
    socks = [_Sock() for _ in range(5 * managers._CHUNK)]
    socks[3].closed = True
    background = managers._Background()
    background.add(["started"], socks)
    background.add(["ended"], socks)
    await asyncio.sleep(0)  # the delivery task starts, serves one chunk, and yields
    served = sum(1 for s in socks if not s.queue.empty())
    assert 0 < served <= managers._CHUNK
    await _settle(background)
    for i, sock in enumerate(socks):
        assert sock.got() == ([] if i == 3 else ["started", "ended"])


async def test_work_queued_meanwhile_is_not_held_behind_a_whole_notice() -> None:
    socks = [_Sock() for _ in range(20 * managers._CHUNK)]
    background = managers._Background()
    background.add(["notice"], socks)
    ran: list[int] = []

    async def other() -> None:  # a token delta's writer, say
        ran.append(sum(1 for s in socks if not s.queue.empty()))

    await asyncio.sleep(0)
    await asyncio.gather(other())
    assert ran and ran[0] < len(socks) // 2  # it ran while most sockets still waited
    await _settle(background)
    assert all(s.got() == ["notice"] for s in socks)


def test_the_org_room_is_the_background_room() -> None:
    import uuid

    org = uuid.uuid4()
    assert is_org_room(org_room(org))
    assert not is_org_room(f"thread:{org}") and not is_org_room(f"user:{org}")
