"""One `ator serve` process driven over HTTP only: a turn with a tool call, idempotent resend,
stop, and usage that agrees whichever way it is grouped."""

from __future__ import annotations

import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.client import Client, script_setup
from tests.e2e.conftest import DatabaseFactory, DeploymentFactory
from tests.e2e.replica import Replica, StartupFailed, bootstrap_key, master_key

pytestmark = pytest.mark.e2e

FAKE_CREDENTIAL = "sk-e2e-looks-like-a-credential"


@pytest.fixture(scope="module")
async def api(deployments: DeploymentFactory) -> Client:
    deployment = deployments()
    return deployment.client(deployment.start("solo"))


async def test_a_turn_with_a_tool_call_then_an_idempotent_resend(api: Client) -> None:
    setup = await api.create_setup(script_setup(
        {"tool_calls": [{"name": "calculator", "input": {"expression": "6*7"}}]},
        {"text": "It is 42."},
        # A step never played, in free text (so accepted); but it looks like a credential,
        # so every view of the config (setup, turn snapshot) must redact it.
        {"text": FAKE_CREDENTIAL},
        # (A scripted setup takes no api_key: references in snapshots are checked in
        # tests/test_setup_config.py and tests/test_secrets.py.)
    ))
    assert setup["config"]["script"][2]["text"] == "[redacted]"
    thread = await api.create_thread(setup["id"])
    assert thread["busy"] is False

    item = await api.post_message(thread["id"], "What is 6*7?", client_message_id="cm-1")
    assert item["created"] is True
    assert item["client_message_id"] == "cm-1"
    events = await api.follow(thread["id"])

    assert [e["kind"] for e in events] == [
        "turn_started", "message", "assistant", "tool_results", "assistant", "turn_ended",
    ]
    message, first, results, answer, end = events[1:]
    assert message["data"]["mailbox_id"] == item["id"]
    assert first["data"]["content"][0]["type"] == "tool_use"
    assert results["data"]["results"][0]["content"] == "42"
    assert results["data"]["results"][0]["is_error"] is False
    assert answer["data"]["content"] == [{"type": "text", "text": "It is 42."}]
    assert end["data"]["stop_reason"] == "end_turn"
    turn_id = end["turn_id"]
    assert {e["turn_id"] for e in events} == {turn_id}
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)

    turn = await api.ok("GET", f"/v1/turns/{turn_id}")
    assert turn["status"] == "done"
    assert turn["stop_reason"] == "end_turn"
    assert turn["thread_id"] == thread["id"]
    assert turn["owner"] == "solo"
    assert turn["steps"] == 2
    assert turn["usage"]["input_tokens"] == 20  # two model calls of 10 in / 5 out
    assert turn["usage"]["output_tokens"] == 10
    assert turn["ended_at"] is not None
    snapshot = turn["config_snapshot"]
    assert snapshot["setup"]["id"] == setup["id"]
    assert snapshot["setup"]["version"] == setup["version"]
    assert snapshot["setup"]["config"]["script"][2]["text"] == "[redacted]"
    assert FAKE_CREDENTIAL not in str(turn)
    assert end["data"]["usage"]["input_tokens"] == 20

    # The resend answers 202 with the same item and runs nothing.
    again = await api.post_message(thread["id"], "What is 6*7?", client_message_id="cm-1")
    assert again["id"] == item["id"]
    assert again["created"] is False
    # Had the resend made an item, it would show up as a turn of its own or as a second
    # message in the next turn. The next message's turn holds that message only.
    last_seq = events[-1]["seq"]
    follow_up = await api.post_message(thread["id"], "And 7*6?", client_message_id="cm-2")
    later = await api.follow(thread["id"], after_seq=last_seq)
    messages = [e for e in later if e["kind"] == "message"]
    assert [m["data"]["mailbox_id"] for m in messages] == [follow_up["id"]]
    turns = await api.turns(thread["id"])
    assert len(turns) == 2
    every = await api.events(thread["id"])
    assert Counter(e["kind"] for e in every)["message"] == 2
    assert (await api.thread(thread["id"]))["last_seq"] == every[-1]["seq"]


async def test_stop_cancels_a_hanging_turn(api: Client) -> None:
    setup = await api.create_setup(script_setup({"hang": True}))
    thread = await api.create_thread(setup["id"])
    await api.post_message(thread["id"], "Take your time.")
    started = await api.follow(thread["id"], lambda e: e["kind"] == "turn_started")
    stop = await api.ok("POST", f"/v1/threads/{thread['id']}/stop", 202)
    assert stop["reason"] == "cancelled:user"

    events = await api.follow(thread["id"], after_seq=started[-1]["seq"], timeout=10)
    end = events[-1]["data"]
    assert end["stop_reason"] == "cancelled:user"
    assert end["status"] == "stopped"
    turn = await api.ok("GET", f"/v1/turns/{started[-1]['turn_id']}")
    assert (turn["status"], turn["stop_reason"]) == ("stopped", "cancelled:user")


async def test_usage_by_org_thread_and_setup_agree(api: Client) -> None:
    setup = await api.create_setup(script_setup({"text": "one"}))
    for text in ("a", "b"):
        thread = await api.create_thread(setup["id"])
        await api.post_message(thread["id"], text)
        await api.follow(thread["id"])

    by: dict[str, list[dict[str, Any]]] = {}
    for group in ("org", "thread", "setup"):
        page = await api.ok("GET", "/v1/usage", params={"group_by": group})
        assert page["group_by"] == group
        by[group] = page["data"]
    month = page["month"]
    assert (await api.ok("GET", "/v1/usage", params={"month": month}))["data"] == by["org"]

    def totals(rows: list[dict[str, Any]]) -> tuple[int, int, int, str]:
        return (sum(r["calls"] for r in rows), sum(r["input_tokens"] for r in rows),
                sum(r["output_tokens"] for r in rows),
                str(sum(Decimal(r["cost_usd"]) for r in rows)))

    assert len(by["org"]) == 1
    assert totals(by["org"]) == totals(by["thread"]) == totals(by["setup"])

    # ... and agree with the turns, read thread by thread.
    threads = (await api.ok("GET", "/v1/threads", params={"limit": 200}))["data"]
    turn_usage = [t["usage"] for th in threads for t in await api.turns(th["id"])]
    assert by["org"][0]["input_tokens"] == sum(u["input_tokens"] for u in turn_usage)
    assert by["org"][0]["output_tokens"] == sum(u["output_tokens"] for u in turn_usage)
    per_setup = {r["key"]: r for r in by["setup"]}
    assert per_setup[setup["id"]]["calls"] == 2
    assert per_setup[setup["id"]]["input_tokens"] == 20

    with pytest.raises(AssertionError, match="422"):
        await api.ok("GET", "/v1/usage", params={"month": "2024-13"})
    bad = await api.request("GET", "/v1/usage", params={"group_by": "nope"})
    assert bad.status_code == 422
    assert bad.headers["content-type"].startswith("application/problem+json")
    assert bad.json()["code"] == "validation_failed"


async def test_errors_are_problem_json_with_a_stable_code(api: Client) -> None:
    async with Client(str(api.http.base_url), key=None) as anonymous:
        response = await anonymous.request("GET", "/v1/threads")
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "unauthenticated"
    wrong = await api.request("GET", "/v1/threads", headers={
        "Authorization": f"Bearer ator_{uuid.uuid4().hex[:8]}_not-a-key"})
    assert wrong.status_code == 401
    assert wrong.json()["code"] == "unauthenticated"
    missing = await api.request("GET", f"/v1/threads/{uuid.uuid4()}")
    assert (missing.status_code, missing.json()["code"]) == (404, "not_found")
    # A name no secret can have is refused like PUT refuses it (it reached the database, and
    # answered 500, when the route took any string).
    odd = await api.request("DELETE", "/v1/secrets/a%00b")
    assert (odd.status_code, odd.json()["code"]) == (422, "validation_failed")


async def test_a_malformed_bootstrap_key_stops_the_start_and_leaves_no_key_behind(
    databases: DatabaseFactory, tmp_path: Path
) -> None:
    """A start refused for a malformed ATOR_BOOTSTRAP_KEY writes no operator key: a key made
    and then refused was never shown to anyone, and kept the corrected key from applying."""
    env = {"ATOR_DATABASE_URL": await databases(), "ATOR_MASTER_KEY": master_key(),
           "ATOR_DATA_DIR": str(tmp_path / "data"), "ATOR_BOOTSTRAP_KEY": "ator_not-a-key"}
    refused = Replica.launch("refused", tmp_path, env)
    with pytest.raises(StartupFailed):
        refused.wait_ready()
    refused.stop()
    assert "ATOR_BOOTSTRAP_KEY must look like" in refused.log()
    key = bootstrap_key()
    fixed = Replica.start("fixed", tmp_path, {**env, "ATOR_BOOTSTRAP_KEY": key})
    try:
        async with httpx.AsyncClient(base_url=fixed.url) as http:
            answer = await http.get("/v1/orgs", headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 200, answer.text
    finally:
        fixed.stop()
