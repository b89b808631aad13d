"""Fault 5: the model endpoint resets connections mid-stream. A real HTTP server (the
OpenAI wire fake) drops the TCP connection of every other response after a few stream
events (`Cut(abrupt=True)`), tool-call replies included, while conversations run on two
replicas. A cut tool call must never run: each thread's tool runs at most once, and every
turn ends typed (done after a retry, or a typed error)."""

from __future__ import annotations

import asyncio
import itertools
import json
import re

import pytest

from ator.testing import Cut, OpenAIWireFake, Reply, ToolCall
from ator.testing.wire import RecordedRequest, ScriptItem
from tests.faults.rig import Load, Rig

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]

CONVERSATIONS = 10


def _model() -> tuple[OpenAIWireFake, dict[str, int]]:
    counts = {"requests": 0, "cuts": 0}
    turn = itertools.count()

    def respond(request: RecordedRequest) -> ScriptItem:
        counts["requests"] += 1
        messages = request.body["messages"]
        if any(m.get("role") == "tool" for m in messages):
            reply = Reply(text="fetched it")
        else:
            text = json.dumps(messages[-1].get("content"))
            url = re.search(r"http://127\.0\.0\.1:\d+/t/[0-9a-f]+", text)
            assert url, text
            reply = Reply(tool_calls=[ToolCall("web_fetch", {"url": url.group(0)})])
        if next(turn) % 2 == 0:
            counts["cuts"] += 1
            return Cut(reply=reply, after_events=2, abrupt=True)
        return reply

    return OpenAIWireFake([], responder=respond, strict=False), counts


async def test_model_endpoint_resets_mid_stream(rig: Rig) -> None:
    fake, counts = _model()
    async with fake:
        rig.extra.update(ATOR_OPENAI_API_KEY="sk-fault", ATOR_OPENAI_BASE_URL=fake.base_url)
        a, b = rig.replica("a"), rig.replica("b")
        clients = [rig.client(a), rig.client(b)]
        await rig.budget(clients[0])
        load = Load(rig)
        setup = await clients[0].create_setup({
            "name": "cut", "provider": "openai", "model": "gpt-4o-mini",
            "tool_policy": {"allow": ["web_fetch"]}})
        posts = []
        for n in range(CONVERSATIONS):
            thread = (await clients[n % 2].create_thread(setup["id"]))["id"]
            url = rig.recorder.url(f"t/{n:04x}{thread.replace('-', '')[:12]}")
            posts.append(asyncio.create_task(load.post(clients, thread, f"fetch {url}")))
        await asyncio.gather(*posts)
        figures = await rig.check(load)
    assert counts["cuts"] > 0
    print(f"\nFAULT model-resets: in flight={CONVERSATIONS} conversations (tool call, then an "
          f"answer), {counts['cuts']} of {counts['requests']} model responses cut by a TCP "
          f"reset mid-stream; checked one turn per message, typed ends, ledger, tool runs; "
          f"{figures.line()}")
