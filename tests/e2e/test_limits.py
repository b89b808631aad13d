"""Bounded inputs and shared resources against real `ator serve` processes.

- Four concurrent, unauthenticated 200 MB posts (declared length, then chunked) are refused
  with 413 problem+json, and the server's resident memory (VmRSS from /proc) grows by less
  than 50 MB. Before the body limit, the same posts took a server from ~207 MB to 2.3 GB.
- With Redis: 500 concurrent long-polls from one viewer are capped (429 `too_many_waits`
  beyond the cap), the waits that are admitted share ONE Redis connection, and meanwhile
  another org's requests and /readyz keep answering 2xx.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio

from tests.conftest import REDIS_URL
from tests.e2e.client import Client, script_setup
from tests.e2e.conftest import DeploymentFactory
from tests.e2e.replica import Replica

pytestmark = pytest.mark.e2e

MB = 1024 * 1024
POST_BYTES = 200 * MB
RSS_BUDGET = 50 * MB
CHUNK = b"x" * MB


def rss(replica: Replica) -> int:
    """Resident set size of the replica's process, in bytes."""
    for line in Path(f"/proc/{replica.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc status")


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip()
               for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


async def big_post(port: int, *, chunked: bool) -> tuple[int, dict[str, str], bytes, int]:
    """POST 200 MB to /v1/threads without a key, over a raw socket, writing the body while
    reading: returns (status, headers, body, bytes written before the answer came)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {POST_BYTES}"
    writer.write(f"POST /v1/threads HTTP/1.1\r\nHost: ator\r\nContent-Type: application/json"
                 f"\r\n{framing}\r\n\r\n".encode())
    answer = asyncio.create_task(_read_response(reader))
    sent = 0
    try:
        while sent < POST_BYTES and not answer.done():
            writer.write(b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK) if chunked else CHUNK)
            sent += len(CHUNK)
            try:
                await writer.drain()
            except ConnectionError:
                break  # the server stopped reading: its answer is already on the way
        status, headers, body = await asyncio.wait_for(answer, 30)
        return status, headers, body, sent
    finally:
        answer.cancel()
        writer.close()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_four_unauthenticated_200mb_posts_are_refused_in_bounded_memory(
    deployments: DeploymentFactory, chunked: bool
) -> None:
    deployment = deployments()
    replica = deployment.start(f"bodies-{'chunked' if chunked else 'length'}")
    before = rss(replica)

    results = await asyncio.gather(*(big_post(replica.port, chunked=chunked) for _ in range(4)))
    after = rss(replica)

    for status, headers, body, _sent in results:
        assert status == 413
        assert headers["content-type"] == "application/problem+json"
        problem = json.loads(body)
        assert problem["code"] == "payload_too_large" and problem["status"] == 413
        assert {"type", "title", "detail"} <= problem.keys()
    grew = after - before
    print(f"\nRSS {'chunked' if chunked else 'content-length'}: before {before / MB:.1f} MB, "
          f"after {after / MB:.1f} MB, grew {grew / MB:.1f} MB; "
          f"bytes written per post before the 413: {[r[3] // MB for r in results]} MB")
    assert grew < RSS_BUDGET
    # The server still serves.
    async with httpx.AsyncClient(base_url=replica.url) as http:
        assert (await http.get("/readyz")).status_code == 200


# -- long-polls on Redis --------------------------------------------------------------------

PER_USER = 100
POLLS = 500


async def _tenant(operator: Client, url: str, name: str) -> tuple[Client, str]:
    org = await operator.ok("POST", "/v1/orgs", 201, json={"name": name})
    key = await operator.ok("POST", f"/v1/orgs/{org['id']}/api-keys", 201,
                            json={"name": "admin", "role": "admin", "email": f"a@{name}"})
    client = Client(url, key["key"])
    # Each request on a new connection: a kept-alive one left idle while the burst is
    # served can be closed by the server's keep-alive timeout just as it is reused, a
    # client-side race that is not what this test is about.
    idle = client.http
    client.http = httpx.AsyncClient(base_url=idle.base_url, headers=idle.headers,
                                    timeout=idle.timeout,
                                    limits=httpx.Limits(max_keepalive_connections=0))
    await idle.aclose()
    return client, org["id"]


async def _hub_connections(prefix: str) -> dict[str, int]:
    """This deployment's Redis connections, by pool name (see coord/redis.py)."""
    raw = redis.asyncio.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        clients: list[dict[str, Any]] = await raw.client_list()
    finally:
        await raw.aclose()
    counts: dict[str, int] = {}
    for client in clients:
        name = client.get("name", "")
        if name.startswith(prefix):
            role = name[len(prefix):]
            counts[role] = counts.get(role, 0) + 1
    return counts


@pytest.mark.redis
async def test_500_long_polls_from_one_viewer_are_capped_and_do_not_starve_others(
    deployments: DeploymentFactory,
) -> None:
    deployment = deployments(redis=True, ATOR_MAX_WAITS_PER_USER=PER_USER,
                             ATOR_MAX_WAITS_PER_ORG=1000, ATOR_RATE_LIMIT_PER_MINUTE=100_000,
                             ATOR_REDIS_POOL_SIZE=8, ATOR_REDIS_REQUEST_POOL_SIZE=8)
    replica = deployment.start("waits")
    prefix = deployment.env["ATOR_REDIS_PREFIX"]
    operator = deployment.client(replica)
    noisy, _ = await _tenant(operator, replica.url, "noisy")
    quiet, _ = await _tenant(operator, replica.url, "quiet")
    deployment.clients += [noisy, quiet]
    viewer_key = await noisy.ok("POST", "/v1/api-keys", 201,
                                json={"name": "v", "role": "viewer", "email": "v@noisy"})
    setup = await noisy.create_setup(script_setup({"text": "hi"}))
    threads = [(await noisy.create_thread(setup["id"]))["id"] for _ in range(10)]
    quiet_setup = await quiet.create_setup(script_setup({"text": "still here"}))
    quiet_thread = await quiet.create_thread(quiet_setup["id"])

    limits = httpx.Limits(max_connections=POLLS + 10, max_keepalive_connections=POLLS + 10)
    async with httpx.AsyncClient(base_url=replica.url, limits=limits, timeout=60,
                                 headers={"Authorization": f"Bearer {viewer_key['key']}"}
                                 ) as viewer:
        async def poll(i: int) -> httpx.Response:
            return await viewer.get(f"/v1/threads/{threads[i % len(threads)]}/events",
                                    params={"wait": 30})

        async def others() -> list[int]:
            """Another org's reads and the readiness probe, while the burst lands."""
            answers = await asyncio.gather(
                *(quiet.request("GET", f"/v1/threads/{quiet_thread['id']}")
                  for _ in range(20)),
                *(quiet.request("GET", "/readyz") for _ in range(20)),
            )
            return [a.status_code for a in answers]

        polls = [asyncio.create_task(poll(i)) for i in range(POLLS)]
        during = asyncio.create_task(others())
        # Every refused poll has its answer long before an admitted one can time out.
        answered = 0
        all_refused = asyncio.Event()

        def count(_task: asyncio.Task[httpx.Response]) -> None:
            nonlocal answered
            answered += 1
            if answered == POLLS - PER_USER:
                all_refused.set()

        for task in polls:
            task.add_done_callback(count)
        await asyncio.wait_for(all_refused.wait(), 30)
        refused = [t.result() for t in polls if t.done()]
        assert len(refused) == POLLS - PER_USER, [r.status_code for r in refused][:5]
        for response in refused:
            assert response.status_code == 429
            assert response.headers["content-type"] == "application/problem+json"
            assert response.json()["code"] == "too_many_waits"
            assert int(response.headers["retry-after"]) >= 1

        # The admitted waits are still open: others are served meanwhile.
        waiting = [t for t in polls if not t.done()]
        assert len(waiting) == PER_USER
        connections = await _hub_connections(prefix)
        assert await during == [200] * 40
        assert await others() == [200] * 40
        item = await quiet.post_message(quiet_thread["id"], "are you there?")
        events = await quiet.follow(quiet_thread["id"], timeout=15)
        assert events[-1]["data"]["stop_reason"] == "end_turn"
        assert events[1]["data"]["mailbox_id"] == item["id"]
        print(f"\nRedis connections of the replica with {PER_USER} waits open: {connections}")
        # One hub connection whatever the number of waits; the pools stay within their caps.
        assert connections.get("hub") == 1
        assert connections.get("coord", 0) <= 8 and connections.get("requests", 0) <= 8
        assert sum(connections.values()) <= 1 + 8 + 8 + 4

        # A commit on each thread wakes every admitted wait (fanned out in-process).
        assert not any(t.done() for t in waiting)
        for thread_id in threads:
            await noisy.post_message(thread_id, "wake up")
        for response in await asyncio.gather(*waiting):
            assert response.status_code == 200
            assert response.json()["data"], "the wait returned without the new events"
