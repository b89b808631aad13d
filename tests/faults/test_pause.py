"""Fault 4: a replica paused with SIGSTOP past its lease, then resumed. While it is paused
the other replica's reaper closes its turn and a new turn on the same thread runs there;
after SIGCONT the paused replica must not write to the thread for the turn it lost, nor
run that turn's tool (the tool's recorder would count the path twice)."""

from __future__ import annotations

import os
import signal

import pytest

from tests.e2e.client import Client
from tests.faults.rig import Load, Rig, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]

MODEL_DELAY = 4.0  # the paused turn's model call: longer than the lease (2 s)


async def test_paused_replica_does_not_write_after_takeover(rig: Rig) -> None:
    a, b = rig.replica("a"), rig.replica("b")
    on_a, on_b = rig.client(a), rig.client(b)
    await rig.budget(on_a)
    load = Load(rig, delay=MODEL_DELAY)
    thread = await load.thread(on_a)
    await load.post([on_a], thread)
    started = await on_b.follow(thread, lambda e: e["kind"] == "turn_started")
    paused_turn = started[-1]["turn_id"]
    assert (await on_b.ok("GET", f"/v1/turns/{paused_turn}"))["owner"] == a.owner

    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        ended = await on_b.follow(thread, after_seq=started[-1]["seq"], timeout=60)
        assert ended[-1]["turn_id"] == paused_turn
        assert ended[-1]["data"]["stop_reason"] == "error:lost"
        # Another turn on the same thread runs on B while A is still paused.
        await load.post([on_b], thread)
        taken = await on_b.follow(thread, after_seq=ended[-1]["seq"], timeout=60)
        assert taken[-1]["data"]["stop_reason"] == "end_turn"
        assert (await on_b.ok("GET", f"/v1/turns/{taken[-1]['turn_id']}"))["owner"] == b.owner
        before = await on_b.events(thread)
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)

    # A is back: its overdue timers (the model call's delay, heartbeats) fire now. Proof that
    # it has run its loop since: it answers, and a turn it accepts after the resume finishes.
    await wait_for("A answers again", lambda: _ready(on_a), 60)
    rest = await on_b.ok("PATCH", f"/v1/setups/{(await on_b.thread(thread))['setup_id']}",
                         json={"config": {"script": [{"text": "after the resume"}]}})
    assert rest["version"] >= 2
    await load.post([on_a], thread)
    after = await on_b.follow(thread, after_seq=before[-1]["seq"], timeout=60)
    assert after[-1]["data"]["stop_reason"] == "end_turn"

    events = await on_b.events(thread)
    late = [e for e in events if e["turn_id"] == paused_turn and e["seq"] > ended[-1]["seq"]]
    assert not late, f"the paused replica wrote after the takeover: {late}"
    turn = await on_b.ok("GET", f"/v1/turns/{paused_turn}")
    assert turn["status"] == "lost"
    figures = await rig.check(load)
    assert sum(rig.recorder.hits.values()) == 1  # B's turn ran the tool; A's never did
    print(f"\nFAULT sigstop-past-lease: in flight=1 turn in a {MODEL_DELAY:g}s model call on "
          f"the paused replica; checked it was closed lost, a new turn ran on the other, no "
          f"event of the lost turn after its end, its tool never ran; {figures.line()}")


async def _ready(client: Client) -> bool:
    response = await client.request("GET", "/readyz")
    return bool(response.status_code == 200)
