"""CPU per streamed chunk in the OpenAI-compatible adapter, against the SDK's typed stream
(bench entry point; imports ator.providers.openai, ator.testing.openai_wire, openai).

    .venv/bin/python bench/provider_chunks.py [--replies 20] [--chunks 500]
    .venv/bin/python bench/provider_chunks.py --replies 500 --chunks 1   # per call

The wire-level fake runs on its own event loop in another thread; the figures are the CPU
time of the consuming thread only (`time.thread_time`), so the server's work is not in them.
Each reply streams `--chunks` content chunks. Compared on the same replies, in the same run:

- sdk typed: `client.chat.completions.create(stream=True)`, iterating the typed chunks (what
  the adapter did before: a pydantic model built per chunk);
- ator adapter: `OpenAIProvider.stream` on the HTTP client ator gives it (the egress guard
  over ator's HTTP/1.1 transport), which sends through the SDK's request path and reads the
  SSE stream itself into ator's stream events.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import openai

from ator.net import Egress
from ator.providers.base import ModelRequest
from ator.providers.openai import OpenAIProvider
from ator.settings import Settings
from ator.testing.openai_wire import OpenAIWireFake
from ator.testing.wire import Reply


def _serve(fake: OpenAIWireFake, ready: threading.Event, stop: threading.Event) -> None:
    async def main() -> None:
        async with fake:
            ready.set()
            await asyncio.to_thread(stop.wait)

    asyncio.run(main())


async def _measure(replies: int, consume: Callable[[], Awaitable[int]]) -> tuple[float, int]:
    await consume()  # warm: connection, imports, caches
    started = time.thread_time()
    chunks = 0
    for _ in range(replies):
        chunks += await consume()
    return time.thread_time() - started, chunks


async def run(args: argparse.Namespace) -> dict[str, Any]:
    pieces = [f"w{i} " for i in range(args.chunks)]
    fake = OpenAIWireFake([Reply(text=pieces)] * (2 * args.replies + 2))
    ready, stop = threading.Event(), threading.Event()
    server = threading.Thread(target=_serve, args=(fake, ready, stop), daemon=True)
    server.start()
    ready.wait(10)
    request = ModelRequest(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    try:
        sdk = openai.AsyncOpenAI(api_key="k", base_url=fake.base_url, max_retries=0)

        async def typed() -> int:
            n = 0
            stream = await sdk.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                stream=True, stream_options={"include_usage": True})
            async for _chunk in stream:
                n += 1
            return n

        # The adapter on the HTTP client ator builds it with (providers/builtin.py): the
        # egress guard over ator's HTTP/1.1 transport (net/h1.py).
        http = Egress.from_settings(Settings(egress_allow="127.0.0.1")).httpx2_client(
            timeout=600.0)
        async with OpenAIProvider(api_key="k", base_url=fake.base_url,
                                  http_client=http) as provider:
            async def adapter() -> int:
                return sum([1 async for _ in provider.stream(request)])

            typed_s, typed_n = await _measure(args.replies, typed)
            ours_s, ours_n = await _measure(args.replies, adapter)
        await http.aclose()
        await sdk.close()
    finally:
        stop.set()
        server.join(10)
    per_typed = typed_s / typed_n * 1e6
    per_ours = ours_s / ours_n * 1e6
    return {
        "replies": args.replies, "chunks_per_reply": args.chunks,
        "sdk_typed_us_per_chunk": round(per_typed, 1),
        "ator_adapter_us_per_event": round(per_ours, 1),
        "ratio": round(per_typed / per_ours, 2),
        # A whole call, request included: what a short reply costs (--chunks 1).
        "sdk_typed_us_per_reply": round(typed_s / args.replies * 1e6, 1),
        "ator_adapter_us_per_reply": round(ours_s / args.replies * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replies", type=int, default=20)
    parser.add_argument("--chunks", type=int, default=500)
    print(json.dumps(asyncio.run(run(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
