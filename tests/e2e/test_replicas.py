"""Two `ator serve` replicas on one PostgreSQL and one Redis behave as one service: events,
stop, busy state, dedupe and rate limits are global, and a SIGKILLed replica's turn is closed
by the survivor's reaper with the thread's history intact."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

import pytest

from tests.e2e.client import Client, script_setup
from tests.e2e.conftest import DatabaseFactory, Deployment, DeploymentFactory
from tests.e2e.replica import Replica

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

LEASE_TTL = 2.0
STOP_WITHIN = 1.0  # seconds from the stop POST returning to turn_ended being visible


@dataclass
class Pair:
    deployment: Deployment
    a: Replica
    b: Replica
    on_a: Client
    on_b: Client


@pytest.fixture(scope="module")
def pair(deployments: DeploymentFactory) -> Pair:
    deployment = deployments(redis=True, ATOR_LEASE_TTL=LEASE_TTL, ATOR_REAPER_INTERVAL=0.5)
    # One after the other: the first bootstraps the operator key (see
    # test_replicas_starting_together_bootstrap_once for starting them together).
    a = deployment.start("replica-a")
    b = deployment.start("replica-b")
    return Pair(deployment, a, b, deployment.client(a), deployment.client(b))


async def test_a_message_posted_to_a_is_followed_from_b(pair: Pair) -> None:
    setup = await pair.on_a.create_setup(script_setup({"text": "hello from the script"}))
    thread = await pair.on_a.create_thread(setup["id"])
    assert (await pair.on_b.thread(thread["id"]))["id"] == thread["id"]

    # B follows while A accepts the message. Whether B's long-poll starts before or after A
    # commits, it must see the whole turn: the notices cross via Redis.
    waiting = asyncio.create_task(pair.on_b.follow(thread["id"]))
    item = await pair.on_a.post_message(thread["id"], "hi")
    events = await waiting

    assert [e["kind"] for e in events] == ["turn_started", "message", "assistant", "turn_ended"]
    assert events[1]["data"]["mailbox_id"] == item["id"]
    assert events[-1]["data"]["stop_reason"] == "end_turn"
    assert await pair.on_b.events(thread["id"]) == events
    turn = await pair.on_b.ok("GET", f"/v1/turns/{events[-1]['turn_id']}")
    assert turn["owner"] == pair.a.owner  # the replica that accepted the message ran it


async def test_stop_on_b_aborts_a_turn_running_on_a_and_busy_is_global(pair: Pair) -> None:
    setup = await pair.on_a.create_setup(script_setup({"hang": True}))
    thread = await pair.on_a.create_thread(setup["id"])
    assert (await pair.on_b.thread(thread["id"]))["busy"] is False

    await pair.on_a.post_message(thread["id"], "never answered")
    started = await pair.on_b.follow(thread["id"], lambda e: e["kind"] == "turn_started")
    turn_id = started[-1]["turn_id"]
    assert (await pair.on_b.ok("GET", f"/v1/turns/{turn_id}"))["owner"] == pair.a.owner
    assert (await pair.on_b.thread(thread["id"]))["busy"] is True
    assert (await pair.on_a.thread(thread["id"]))["busy"] is True

    await pair.on_b.ok("POST", f"/v1/threads/{thread['id']}/stop", 202)
    stopped_at = time.monotonic()
    events = await pair.on_b.follow(thread["id"], after_seq=started[-1]["seq"],
                                    timeout=STOP_WITHIN + 5)
    took = time.monotonic() - stopped_at

    assert events[-1]["data"]["stop_reason"] == "cancelled:user"
    assert took <= STOP_WITHIN, f"turn_ended arrived {took:.3f}s after the stop"
    turn = await pair.on_a.ok("GET", f"/v1/turns/{turn_id}")
    assert (turn["status"], turn["stop_reason"]) == ("stopped", "cancelled:user")


async def test_dedupe_is_global(pair: Pair) -> None:
    setup = await pair.on_a.create_setup(script_setup({"text": "once"}))
    thread = await pair.on_a.create_thread(setup["id"])
    seq = 0
    for n in range(5):
        cmid = f"both-{n}-{uuid.uuid4().hex[:6]}"
        from_a, from_b = await asyncio.gather(
            pair.on_a.post_message(thread["id"], f"message {n}", client_message_id=cmid),
            pair.on_b.post_message(thread["id"], f"message {n}", client_message_id=cmid),
        )
        assert from_a["id"] == from_b["id"]
        assert sorted([from_a["created"], from_b["created"]]) == [False, True]
        events = await pair.on_b.follow(thread["id"], after_seq=seq)
        seq = events[-1]["seq"]
        messages = [e for e in events if e["kind"] == "message"]
        assert [m["data"]["mailbox_id"] for m in messages] == [from_a["id"]]

    assert len(await pair.on_a.turns(thread["id"])) == 5
    every = await pair.on_b.events(thread["id"])
    assert sum(e["kind"] == "message" for e in every) == 5


async def test_a_sigkilled_replicas_turn_is_reaped_and_the_thread_goes_on(pair: Pair) -> None:
    # A third replica, so the module's pair survives. The turn runs where it was posted.
    doomed = pair.deployment.start("replica-doomed")
    on_doomed = pair.deployment.client(doomed)
    setup = await pair.on_b.create_setup(script_setup({"hang": True}))
    thread = await pair.on_b.create_thread(setup["id"])

    first = await on_doomed.post_message(thread["id"], "remember the number 7431")
    started = await pair.on_b.follow(thread["id"], lambda e: e["kind"] == "turn_started")
    lost_turn = started[-1]["turn_id"]
    assert (await pair.on_b.ok("GET", f"/v1/turns/{lost_turn}"))["owner"] == doomed.owner

    doomed.kill()

    # The lease (TTL 2 s) lapses, the reaper (every 0.5 s) closes the turn.
    events = await pair.on_b.follow(thread["id"], after_seq=started[-1]["seq"], timeout=20)
    end = events[-1]
    assert end["turn_id"] == lost_turn
    assert end["data"]["stop_reason"] == "error:lost"
    turn = await pair.on_b.ok("GET", f"/v1/turns/{lost_turn}")
    assert (turn["status"], turn["stop_reason"]) == ("lost", "error:lost")
    assert (await pair.on_b.thread(thread["id"]))["busy"] is False

    # The script is chosen per turn position, so a new turn would hang again: switch the
    # setup to an echo script (a new setup version) before asking again.
    patched = await pair.on_b.ok("PATCH", f"/v1/setups/{setup['id']}",
                                 json={"config": {"script": [{"echo": True}]}})
    assert patched["version"] == setup["version"] + 1
    second = await pair.on_b.post_message(thread["id"], "which number?")
    events = await pair.on_b.follow(thread["id"], after_seq=end["seq"])
    assert [e["kind"] for e in events] == ["turn_started", "message", "assistant", "turn_ended"]
    assert events[-1]["data"]["stop_reason"] == "end_turn"
    assert events[1]["data"]["mailbox_id"] == second["id"]
    # The unanswered first message, ator's note that the turn taking it was interrupted,
    # and the new one are one user message in the model's context; the echo repeats it all.
    reply = events[2]["data"]["content"][0]["text"].split("\n")
    assert reply[0] == "You said: remember the number 7431"
    assert reply[1].startswith("[ator] Your previous turn was interrupted")
    assert reply[2] == "which number?"
    history = await pair.on_a.events(thread["id"])
    assert [e["data"]["mailbox_id"] for e in history if e["kind"] == "message"] == [
        first["id"], second["id"]]
    snapshot = (await pair.on_b.ok("GET", f"/v1/turns/{events[-1]['turn_id']}"))[
        "config_snapshot"]
    assert snapshot["setup"]["version"] == patched["version"]


async def test_rate_limits_are_global(
    deployments: DeploymentFactory, databases: DatabaseFactory
) -> None:
    # Its own database: the pair's admin key has spent its minute's budget many times over.
    async with deployments(redis=True, database_url=await databases(),
                           ATOR_RATE_LIMIT_PER_MINUTE=10) as limited:
        a, b = limited.start("limited-a"), limited.start("limited-b")
        # A fresh key is a fresh (org, user) counter: creating it cost the admin key one.
        made = await limited.client(a).ok("POST", "/v1/api-keys", 201, json={
            "name": "counted", "role": "viewer", "email": f"{uuid.uuid4().hex[:8]}@e2e.test"})
        clients = [limited.client(a, made["key"]), limited.client(b, made["key"])]

        # The counter is per wall-clock minute: do not straddle a window edge. This waits for
        # a clock, not for the system under test, so a bounded sleep is the honest tool.
        if time.time() % 60 > 55:
            await asyncio.sleep(60 - time.time() % 60 + 0.1)
        for n in range(10):
            response = await clients[n % 2].request("GET", "/v1/threads")
            assert response.status_code == 200, (n, response.text)
        response = await clients[10 % 2].request("GET", "/v1/threads")

        assert response.status_code == 429
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["code"] == "rate_limited"
        assert 1 <= int(response.headers["retry-after"]) <= 60
        assert (await clients[1].request("GET", "/v1/threads")).status_code == 429


async def test_replicas_starting_together_bootstrap_once(
    deployments: DeploymentFactory, databases: DatabaseFactory
) -> None:
    """Three replicas on an empty database: one operator org, and all three come up (the
    bootstrap runs under an advisory lock)."""
    async with deployments(database_url=await databases()) as together:
        replicas = [together.launch(f"together-{n}") for n in range(3)]
        for replica in replicas:
            replica.wait_ready()
        orgs = await together.client(replicas[-1]).ok("GET", "/v1/orgs")
        assert [o["name"] for o in orgs["data"]] == ["operator"]
