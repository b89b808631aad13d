"""What tracing costs: the same turns with tracing off (ator's default) and on (the
OpenTelemetry SDK recording every span into a batch processor), and the per-call cost of the
span entry points when off against a bare `nullcontext` (bench entry point).

    ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/tracing.py [--turns 200]

Prints p50/p95 per turn for both modes and the ratio on/off, then ns per `tracing.span()`
and `tracing.traceparent()` when off against `nullcontext()`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from ator import Ator, Scope
from ator.obs import tracing
from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage
from ator.settings import Settings


class Instant:
    name = "instant"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        yield TextDelta("ok")
        yield MessageStop("end_turn", Usage(10, 10), request.model)


class Dropping(SpanExporter):
    """An exporter that drops what it is given (the SDK's own work is what is measured)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: object) -> SpanExportResult:
        self.spans += len(spans)  # type: ignore[arg-type]
        return SpanExportResult.SUCCESS


async def _turns(ator: Ator, n: int) -> list[float]:
    scope = Scope((await ator.create_org(f"bench-{uuid.uuid4().hex[:6]}")).id)
    setup = await ator.create_setup(scope, name="s", provider="instant",
                                    model="claude-haiku-4-5")
    thread = await ator.create_thread(scope, setup.id)
    took = []
    for i in range(n):
        started = time.perf_counter()
        with tracing.span("bench request"):
            await ator.ask(scope, thread.id, f"turn {i}", timeout=30)
        took.append((time.perf_counter() - started) * 1000)
    return took


def _p(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _ns_per_call(fn: object, n: int = 200_000) -> float:
    started = time.perf_counter_ns()
    for _ in range(n):
        with fn():  # type: ignore[operator]
            pass
    return (time.perf_counter_ns() - started) / n


async def main(turns: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), database_url=os.environ.get("ATOR_DATABASE_URL"))
        async with contextlib.AsyncExitStack() as stack:
            ator = await Ator.open(settings, providers={"instant": Instant()})
            stack.push_async_callback(ator.close)
            await _turns(ator, 20)  # warm up
            off = await _turns(ator, turns)
            exporter = Dropping()
            provider = TracerProvider()
            provider.add_span_processor(BatchSpanProcessor(exporter))
            tracing.use(provider)
            try:
                on = await _turns(ator, turns)
            finally:
                tracing.use(None)
                provider.shutdown()
    print(f"turns: {turns} each; spans recorded with tracing on: {exporter.spans}")
    print(f"tracing off: p50 {_p(off, 50):.2f} ms  p95 {_p(off, 95):.2f} ms")
    print(f"tracing on : p50 {_p(on, 50):.2f} ms  p95 {_p(on, 95):.2f} ms")
    print(f"ratio on/off p50: {_p(on, 50) / _p(off, 50):.3f}")
    bare = _ns_per_call(contextlib.nullcontext)
    span = _ns_per_call(lambda: tracing.span("x"))
    started = time.perf_counter_ns()
    for _ in range(200_000):
        tracing.traceparent()
    parent = (time.perf_counter_ns() - started) / 200_000
    print(f"off: tracing.span() {span:.0f} ns/call, nullcontext() {bare:.0f} ns/call "
          f"(ratio {span / bare:.2f}); tracing.traceparent() {parent:.0f} ns/call")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    asyncio.run(main(parser.parse_args().turns))
