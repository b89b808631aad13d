"""Bytes per model call over a 60-iteration tool session, without and with compaction
(bench entry point; imports ator and the harness module next to it: pgserver).

    ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/context_session.py [--iterations 60] [--result-kib 32]
        [--limit 100000]

The real `anthropic` SDK talks HTTP to ator's wire-level Anthropic fake; a native tool
returns `--result-kib` KiB per call. "before" runs the session with no limit that compaction
would act on (what every request would have been); "after" with the transport body limit
`--limit`, as the fake enforces it (a larger body is a 413). Prints one JSON line per run:
step calls, compaction calls, bytes per step call (mean, p50, max), total bytes sent, the
USD billed, the cache-hit ratio on the fake's simulated prompt cache, and what the next
turn's start reads of the thread's history (rows and bytes, of all). Without
ATOR_DATABASE_URL it starts the embedded PostgreSQL.

Beside the measured cache-hit ratio, the limited run prints the ceiling any compaction can
reach here (`cache_hit_ceiling`), from the run's own sizes. Every result is new to the
cache once, when it is first sent. A compaction removes the oldest results, which sit right
after the fixed prefix P (system and tools), so the request after it reads only P from the
cache. With at most n whole results of R tokens per request, a cycle is n step calls
reading P, P+R, ..., P+(n-1)R and one summary call reading at most P+nR, while nR is new:
ceiling(n) = ((n+1)P + n(n+1)R/2) / ((n+1)P + n(n+1)R/2 + nR). n is measured (results per
step request under the budget) and also taken at the transport's physical maximum
(`--limit` bytes, no threshold).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import uuid
from typing import Any

import sqlalchemy as sa
from pgserver import PgServer

from ator.agent.compaction import SUMMARY_SYSTEM
from ator.engine.runtime import Ator
from ator.settings import Settings
from ator.store import turns as turn_store
from ator.store.events import HISTORY_KINDS
from ator.store.schema import events, model_calls
from ator.store.scope import Scope
from ator.testing import AnthropicWireFake, RecordedRequest, Reply, ToolCall, WireUsage
from ator.tools.base import Tool, ToolContext

MODEL = "claude-haiku-4-5"


def asks_summary(body: dict[str, Any]) -> bool:
    """A compaction call: asked in place (the ask is the last message's last block) or of a
    transcript (no tools)."""
    last = body["messages"][-1]["content"]
    text = last[-1].get("text", "") if isinstance(last, list) and last else str(last)
    return "tools" not in body or text.startswith(SUMMARY_SYSTEM)


class Model:
    """Calls `fetch_page` `iterations` times, then answers; summarizes when sent no tools."""

    def __init__(self, iterations: int) -> None:
        self.iterations = iterations
        self.calls = 0

    def __call__(self, request: RecordedRequest) -> Reply:
        usage = WireUsage(input_tokens=len(request.raw) // 4, output_tokens=40)
        if asks_summary(request.body):
            return Reply(text=f"Summary: pages 1..{self.calls} fetched.", usage=usage)
        if self.calls < self.iterations:
            self.calls += 1
            return Reply(tool_calls=[ToolCall("fetch_page", {"n": self.calls},
                                              id=f"toolu_{uuid.uuid4().hex[:12]}")], usage=usage)
        return Reply(text=f"Read {self.calls} pages.", usage=usage)


def page_tool(size: int) -> Tool:
    async def page(args: dict[str, Any], ctx: ToolContext) -> str:
        word = f"page{args['n']} "
        return (word * (size // len(word) + 1))[:size]

    return Tool(name="fetch_page", description="Fetch page n.",
                input_schema={"type": "object", "properties": {"n": {"type": "integer"}},
                              "required": ["n"]}, handler=page)


def _ratio(n: int, p: float, r: float) -> float:
    """The cache-hit ceiling of one compaction cycle (see the module)."""
    read = (n + 1) * p + n * (n + 1) * r / 2
    return read / (read + n * r)


def cache_hit_ceiling(bodies: list[dict[str, Any]], limit: int) -> dict[str, Any]:
    """The ceiling of the cache-hit ratio for these step requests (see the module)."""
    def size(value: Any) -> int:
        return len(json.dumps(value, separators=(",", ":")))

    fixed = statistics.median(size({k: v for k, v in b.items() if k != "messages"})
                              for b in bodies)
    def answers(m: dict[str, Any]) -> bool:
        return isinstance(m["content"], list) and any(
            c.get("type") == "tool_result" for c in m["content"])

    # One iteration: the assistant's tool call and the user message with its result.
    result = statistics.median(size(b["messages"][i - 1]) + size(m) for b in bodies
                               for i, m in enumerate(b["messages"]) if i and answers(m))
    per_request = max(sum(1 for m in b["messages"] if answers(m)) for b in bodies)
    physical = int((limit - fixed) // result)
    return {"results_per_request": per_request, "fixed_prefix_bytes": int(fixed),
            "result_bytes": int(result),
            "ceiling": round(_ratio(per_request, fixed, result), 3),
            "physical_max_results_per_request": physical,
            "ceiling_at_physical_max": round(_ratio(physical, fixed, result), 3)}


async def session(url: str, data_dir: str, *, iterations: int, size: int,
                  limit: int | None) -> dict[str, Any]:
    settings = Settings(database_url=url, data_dir=data_dir, egress_allow=("127.0.0.1",),
                        cap_ceilings={"max_turn_tokens": 1_000_000_000})
    model = Model(iterations)
    async with AnthropicWireFake(responder=model, max_body_bytes=limit,
                                 prompt_cache=True) as fake:
        ator = await Ator.open(settings, tools=[page_tool(size)])
        try:
            scope = Scope((await ator.create_org(f"o-{uuid.uuid4().hex[:6]}")).id)
            await ator.put_secret(scope, "anthropic", "sk-ant-bench")
            config: dict[str, Any] = {
                "api_key": "secret:anthropic", "base_url": fake.base_url,
                "caps": {"max_steps": iterations + 10, "tool_result_chars": size + 1000,
                         "max_turn_tokens": 1_000_000_000},
            }
            if limit is None:
                config["context_window"] = 100_000_000  # nothing for compaction to act on
                config["body_limit"] = 1024 * 1024 * 1024
            else:
                config["body_limit"] = limit
            setup = await ator.create_setup(scope, name="s", provider="anthropic",
                                            model=MODEL, config=config)
            thread = await ator.create_thread(scope, setup.id)
            result = await ator.ask(scope, thread.id, f"Read pages 1 to {iterations}.",
                                    timeout=600)
            rows = list(await ator.db.read(sa.select(model_calls).where(
                model_calls.c.thread_id == thread.id)))
            # What the next turn's start reads (nothing is pending: a read, no turn).
            start, _ = await turn_store.start_turn(ator.db, scope, thread.id, uuid.uuid4(),
                                                   owner="bench")
            logged = [r.data for r in await ator.db.read(sa.select(events.c.data).where(
                events.c.thread_id == thread.id, events.c.kind.in_(HISTORY_KINDS)))]
        finally:
            await ator.close()
    steps = [len(r.raw) for r in fake.requests if not asks_summary(r.body)]
    ceiling = (None if limit is None else
               cache_hit_ceiling([r.body for r in fake.requests if not asks_summary(r.body)],
                                 limit))
    read = sum(r.cache_read_tokens for r in rows)
    fed = sum(r.input_tokens + r.cache_read_tokens + r.cache_write_tokens for r in rows)
    return {
        "run": "before (no compaction)" if limit is None else f"after (limit {limit} B)",
        "status": result.status, "answer": result.text,
        "step_calls": len(steps),
        "compaction_calls": sum(1 for r in rows if r.purpose == "compaction"),
        "bytes_per_step_call": {"mean": int(statistics.mean(steps)),
                                "p50": int(statistics.median(steps)), "max": max(steps)},
        "bytes_sent_total": sum(len(r.raw) for r in fake.requests),
        "usd": str(sum((r.cost_usd for r in rows), start=0)),
        # Cache read / all input tokens, every call (summaries too), on the fake's simulated
        # Anthropic prompt cache (ator.testing.anthropic_wire.PromptCache).
        "cache_hit_ratio": round(read / fed, 4) if fed else 0.0,
        "over_limit_requests": len(fake.failures),
        **({} if ceiling is None else {"cache_hit_ceiling": ceiling}),
        "next_turn_start_reads": {"rows": len(start.history),
                                  "bytes": len(json.dumps([e["data"] for e in start.history])),
                                  "of_rows": len(logged),
                                  "of_bytes": len(json.dumps(logged))},
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--result-kib", type=int, default=32)
    parser.add_argument("--limit", type=int, default=100_000)
    args = parser.parse_args()
    server = await PgServer.start()
    try:
        for limit in (None, args.limit):
            name = f"ator_bench_ctx_{uuid.uuid4().hex[:8]}"
            url = await server.recreate(name)
            with tempfile.TemporaryDirectory() as data_dir:
                print(json.dumps(await session(url, data_dir, iterations=args.iterations,
                                               size=args.result_kib * 1024, limit=limit)))
            await server.drop(name)
    finally:
        await server.close()


if __name__ == "__main__":
    asyncio.run(main())
