"""The first model call of a process must not block the event loop (it used to, for ~1.1 s, while
the SDK was imported on the loop). Measured in a fresh interpreter, where nothing is loaded yet,
with a loop-lag probe: a task that records how late its 10 ms sleeps wake up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ator

#: The most the loop may stall while a first call is set up and made.
MAX_LAG = 0.25

SCRIPT = r"""
import asyncio, json, sys

async def lag_probe(stop, worst):
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        started = loop.time()
        await asyncio.sleep(0.01)
        worst[0] = max(worst[0], loop.time() - started - 0.01)

async def measured(fn):
    stop, worst = asyncio.Event(), [0.0]
    probe = asyncio.create_task(lag_probe(stop, worst))
    await asyncio.sleep(0.02)
    result = await fn()
    stop.set()
    await probe
    return result, worst[0]

async def main():
    from ator.providers.base import ModelRequest
    from ator.providers.registry import ProviderRegistry
    from ator.settings import Settings
    from ator.testing import AnthropicWireFake, OpenAIWireFake, Reply

    out = {"loaded_at_start": [m for m in ("anthropic", "openai") if m in sys.modules]}
    # What the engine does at start: the SDKs are imported in a worker thread.
    out["preload"] = await ProviderRegistry(Settings()).preload()
    request = ModelRequest(
        model="m", messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    )
    for vendor, fake_cls in (("anthropic", AnthropicWireFake), ("openai", OpenAIWireFake)):
        async with fake_cls([Reply(text="hello there")]) as fake:
            async def first_call():
                # What the registry and the loop do on the first call: import the adapter,
                # build the provider (off the loop: building an SDK client loads the CA bundle,
                # ~50 ms), stream.
                if vendor == "anthropic":
                    from ator.providers.anthropic import AnthropicProvider as cls
                else:
                    from ator.providers.openai import OpenAIProvider as cls
                provider = await asyncio.to_thread(cls, api_key="k", base_url=fake.base_url)
                async with provider:
                    return [type(e).__name__ async for e in provider.stream(request)]
            events, lag = await measured(first_call)
            out[vendor] = {"lag": lag, "last": events[-1]}
    print(json.dumps(out))

asyncio.run(main())
"""


def test_the_first_call_in_a_fresh_process_does_not_block_the_loop() -> None:
    src = str(Path(ator.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": src}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # Nothing imported the SDKs before the first call, or this test would prove nothing.
    assert out["loaded_at_start"] == []
    for vendor in ("anthropic", "openai"):
        assert out[vendor]["last"] == "MessageStop"
        assert out[vendor]["lag"] < MAX_LAG, (vendor, out)
