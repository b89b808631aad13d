"""Voice: the mode adds the voice layer to the prompt (and the inspector records it), a reply
spoken by the local engine (Debian's espeak-ng) is a valid WAV file whose duration, read back
by `sox`, grows with the text; the OpenAI-compatible engine posts the reply to
`/audio/speech` through the egress guard and streams what it answers; another org's thread
is 404 and a thread without a reply is `no_reply`."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from ator import Scope
from ator.net import Egress, EgressPolicy, StaticResolver
from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage
from ator.voice import OpenAISpeech, Voice
from tests.conftest import operator_client

MODEL = "claude-haiku-4-5"
SHORT = "Hello there."
LONG = ("Hello there. This reply is a good deal longer than the first one, so that the "
        "spoken version of it takes several seconds more to say out loud, one word after "
        "another, until the very end of the sentence.")


class Replies:
    """Answers with the texts in turn; keeps every request's system prompt."""

    name = "replies"

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.systems: list[str] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.systems.append("\n".join(b.text for b in request.system))
        yield TextDelta(self.texts.pop(0) if len(self.texts) > 1 else self.texts[0])
        yield MessageStop("end_turn", Usage(10, 10), request.model)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _org(client: httpx.AsyncClient, op: str) -> tuple[str, str]:
    org = (await client.post("/v1/orgs", json={"name": f"v-{uuid.uuid4().hex[:6]}"},
                             headers=auth(op))).json()
    key = (await client.post(f"/v1/orgs/{org['id']}/api-keys", headers=auth(op), json={
        "name": "k", "role": "admin", "email": "a@v.x"})).json()["key"]
    return org["id"], key


async def _sox_seconds(path: Path) -> float:
    """The duration sox reads by decoding the whole file (a streamed WAV's header holds
    placeholder sizes, so the samples, not the header, say how long it is)."""
    proc = await asyncio.create_subprocess_exec(
        "sox", str(path), "-n", "stat", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    text = err.decode()
    assert "fail" not in text.lower(), text
    found = re.search(r"Length \(seconds\):\s+([0-9.]+)", text)
    assert found, text
    return float(found.group(1))


async def _soxi(path: Path, flag: str) -> str:
    proc = await asyncio.create_subprocess_exec("soxi", flag, str(path),
                                                stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    assert proc.returncode == 0
    return out.decode().strip()


async def test_voice_mode_adds_the_voice_layer_and_replies_are_spoken_longer_for_longer_text(
        make_ator, tmp_path: Path) -> None:
    provider = Replies(SHORT, LONG)
    async with operator_client(make_ator, providers={"replies": provider},
                               rate_limit_per_minute=10_000) as (client, op, ator):
        org_id, key = await _org(client, op)
        scope = Scope(uuid.UUID(org_id))
        setup = (await client.post("/v1/setups", headers=auth(key), json={
            "name": "s", "provider": "replies", "model": MODEL})).json()
        thread = (await client.post("/v1/threads", headers=auth(key),
                                    json={"setup_id": setup["id"]})).json()
        tid = uuid.UUID(thread["id"])
        none = await client.get(f"/v1/threads/{tid}/speech", headers=auth(key))
        assert (none.status_code, none.json()["code"]) == (404, "no_reply")
        on = await client.put(f"/v1/threads/{tid}/voice", headers=auth(key),
                              json={"enabled": True})
        assert on.status_code == 200 and on.json()["voice"] is True
        assert (await client.get(f"/v1/threads/{tid}", headers=auth(key))).json()["voice"]
        first = await ator.ask(scope, tid, "say something short", timeout=30)
        assert "## voice" in provider.systems[-1]
        calls = (await client.get(f"/v1/turns/{first.turn_id}/calls",
                                  headers=auth(key))).json()["data"]
        assert "voice" in json.dumps(calls[0])  # the inspector names the layer
        short = await client.get(f"/v1/threads/{tid}/speech", headers=auth(key))
        assert short.status_code == 200, short.text
        assert short.headers["content-type"] == "audio/wav"
        assert short.headers["x-ator-speech-engine"] == "espeak-ng"
        second = await ator.ask(scope, tid, "now say something long", timeout=30)
        long = await client.get(f"/v1/threads/{tid}/speech", headers=auth(key))
        assert long.headers["x-ator-turn-id"] == str(second.turn_id)
        again = await client.get(f"/v1/threads/{tid}/speech", headers=auth(key),
                                 params={"turn_id": str(first.turn_id)})
        assert again.content == short.content  # the same reply speaks the same
        files = {}
        for name, response in (("short", short), ("long", long)):
            path = tmp_path / f"{name}.wav"
            path.write_bytes(response.content)
            assert response.content[:4] == b"RIFF" and response.content[8:12] == b"WAVE"
            assert await _soxi(path, "-t") == "wav"
            assert await _soxi(path, "-c") == "1"
            files[name] = await _sox_seconds(path)
        assert 0.5 < files["short"] < files["long"]
        assert files["long"] > 3 * files["short"]
        off = await client.put(f"/v1/threads/{tid}/voice", headers=auth(key),
                               json={"enabled": False})
        assert off.json()["voice"] is False
        await ator.ask(scope, tid, "and now?", timeout=30)
        assert "## voice" not in provider.systems[-1]
        # Another org's thread is a plain 404.
        _, other = await _org(client, op)
        for method, path in (("GET", f"/v1/threads/{tid}/speech"),
                             ("PUT", f"/v1/threads/{tid}/voice")):
            theirs = await client.request(method, path, headers=auth(other),
                                          json={"enabled": True} if method == "PUT" else None)
            assert (theirs.status_code, theirs.json()["code"]) == (404, "not_found")


async def test_the_speech_api_gets_the_reply_through_the_egress_guard(make_ator) -> None:
    seen: list[httpx.Request] = []
    audio = b"RIFF" + b"\0" * 4 + b"WAVE" + b"x" * 70_000

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=audio, headers={"content-type": "audio/wav"})

    egress = Egress(EgressPolicy(), StaticResolver({"speech.example": ["93.184.216.34"]}))
    engine = OpenAISpeech(egress, "https://speech.example/v1", model="tts-1", voice="alloy",
                          api_key="sk-test", transport=httpx.MockTransport(answer))
    async with make_ator(providers={"replies": Replies(SHORT)}) as ator:
        scope = Scope((await ator.create_org("speech-api")).id)
        setup = await ator.create_setup(scope, name="s", provider="replies", model=MODEL)
        thread = await ator.create_thread(scope, setup.id)
        await ator.ask(scope, thread.id, "hi", timeout=30)
        spoken = await Voice(ator.db, ator.settings, engine).speak(scope, thread.id)
        got = b"".join([chunk async for chunk in spoken.audio])
        await engine.aclose()
    assert got == audio and spoken.engine == "openai"
    (request,) = seen
    assert str(request.url) == "https://speech.example/v1/audio/speech"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert json.loads(request.content) == {"model": "tts-1", "input": SHORT, "voice": "alloy",
                                           "response_format": "wav"}

