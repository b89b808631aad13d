"""Traces with OpenTelemetry's in-memory exporter: a message posted over HTTP on replica A
and run by replica B is one trace (request → turn → model call with tokens and cost); a job
continues the trace of whoever enqueued it; log lines carry the trace id; and with tracing
off nothing is recorded and no trace context is written."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ator import Scope
from ator.jobs import JobKinds, JobQueue
from ator.obs import tracing
from ator.obs.logging import configure_logging
from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage
from ator.retention import KIND
from tests.conftest import REDIS_URL, ended, operator_client, wait_for_event

MODEL = "claude-haiku-4-5"


class Honest:
    name = "honest"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        yield TextDelta("ok")
        yield MessageStop("end_turn", Usage(10, 10), request.model)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        yield exporter
    finally:
        tracing.use(None)
        provider.shutdown()


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _named(found: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in found if s.name.startswith(prefix)]


def _ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[str]:
    names = []
    parent = span.parent
    while parent is not None and parent.span_id in by_id:
        up = by_id[parent.span_id]
        names.append(up.name)
        parent = up.parent
    return names


async def test_a_turn_posted_on_a_and_run_on_b_is_one_trace(
        make_ator, spans: InMemorySpanExporter, tmp_path: Any) -> None:
    prefix = f"ator-test-trace-{os.getpid()}-{uuid.uuid4().hex[:6]}:"
    shared = {"redis_url": REDIS_URL, "redis_prefix": prefix, "rate_limit_per_minute": 10_000}
    # A takes the request and runs no turns (its actor is shut, as on a draining replica);
    # B's sweep finds the item nobody picked up and runs it.
    async with operator_client(make_ator, providers={"h": Honest()}, engine=False,
                               owner_id="replica-a", **shared) as (client, op, a), \
            make_ator(providers={"h": Honest()}, owner_id="replica-b", **shared) as b:
        await a.actor.close()
        org = (await client.post("/v1/orgs", json={"name": "traced"}, headers=auth(op))).json()
        key = (await client.post(f"/v1/orgs/{org['id']}/api-keys", headers=auth(op), json={
            "name": "k", "role": "admin", "email": "a@t.x"})).json()["key"]
        setup = (await client.post("/v1/setups", headers=auth(key), json={
            "name": "s", "provider": "h", "model": MODEL})).json()
        thread = (await client.post("/v1/threads", headers=auth(key),
                                    json={"setup_id": setup["id"]})).json()
        spans.clear()
        posted = await client.post(f"/v1/threads/{thread['id']}/messages", headers=auth(key),
                                   json={"text": "hello"})
        assert posted.status_code == 202, posted.text
        scope = Scope(uuid.UUID(org["id"]))
        end = await wait_for_event(b, scope, uuid.UUID(thread["id"]), ended, timeout=60)
        owner = (await b.db.read(sa.text("SELECT owner FROM turns WHERE id = :id"),
                                 {"id": uuid.UUID(end.data["turn_id"])}))[0].owner
        assert owner == "replica-b"  # it ran on B

        found = list(spans.get_finished_spans())
        by_id = {s.context.span_id: s for s in found}
        request = [s for s in _named(found, "POST ") if "messages" in s.name]
        assert len(request) == 1, [s.name for s in found]
        trace_id = request[0].context.trace_id
        (turn,) = [s for s in _named(found, "ator.turn")
                   if s.attributes["ator.thread_id"] == thread["id"]]
        (call,) = [s for s in _named(found, f"chat {MODEL}")
                   if s.context.trace_id == turn.context.trace_id]
        assert turn.context.trace_id == trace_id  # one trace across the two replicas
        assert _ancestors(turn, by_id)[-1] == request[0].name
        assert _ancestors(call, by_id)[0] == "ator.turn"
        attrs = call.attributes
        assert attrs["gen_ai.request.model"] == MODEL
        assert attrs["gen_ai.operation.name"] == "chat"
        assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) \
            == (10, 10)
        assert attrs["ator.cost_usd"] > 0
        assert turn.attributes["ator.turn.stop_reason"] == "end_turn"
        # The mailbox row carried the request's trace to B.
        carried = (await a.db.read(sa.text(
            "SELECT traceparent FROM mailbox WHERE thread_id = :t"),
            {"t": uuid.UUID(thread["id"])}))[0].traceparent
        assert carried.split("-")[1] == f"{trace_id:032x}"


async def test_a_job_continues_the_trace_of_whoever_enqueued_it(
        make_ator, spans: InMemorySpanExporter) -> None:
    async with make_ator(job_poll_interval=0.05) as ator:
        scope = Scope((await ator.create_org("jobs-traced")).id)
        queue = JobQueue(ator.db, ator.service(JobKinds))
        with tracing.span("enqueue here"):
            job_id = await queue.enqueue(scope, KIND)
        assert job_id is not None
        await ator.start_jobs()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while (await queue.get(scope, job_id)).state != "done":
            assert loop.time() < deadline, "the job did not run"
            await asyncio.sleep(0.05)
        found = list(spans.get_finished_spans())
        (root,) = _named(found, "enqueue here")
        job = [s for s in _named(found, f"job {KIND}")
               if s.attributes["ator.job.id"] == job_id]
        assert len(job) == 1
        assert job[0].context.trace_id == root.context.trace_id
        assert job[0].parent is not None and job[0].parent.span_id == root.context.span_id


def test_log_lines_carry_the_trace_id_beside_the_request_id(
        spans: InMemorySpanExporter) -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    configure_logging(json_lines=True, level="INFO")
    (handler,) = [h for h in root.handlers if h.get_name() == "ator"]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    try:
        with tracing.span("logged"):
            logging.getLogger("ator.test").info("inside")
    finally:
        root.handlers, root.level = handlers, level
    (logged,) = _named(list(spans.get_finished_spans()), "logged")
    assert f'"trace_id":"{logged.context.trace_id:032x}"' in stream.getvalue()


async def test_with_tracing_off_nothing_is_recorded_or_carried(make_ator) -> None:
    assert not tracing.enabled()
    with tracing.span("nothing") as span:
        assert span is tracing.NOOP
        assert tracing.traceparent() is None
        assert tracing.log_ids() == {}
    async with make_ator(providers={"h": Honest()}) as ator:
        scope = Scope((await ator.create_org("untraced")).id)
        setup = await ator.create_setup(scope, name="s", provider="h", model=MODEL)
        thread = await ator.create_thread(scope, setup.id)
        assert (await ator.ask(scope, thread.id, "hi", timeout=30)).stop_reason == "end_turn"
        rows = await ator.db.read(sa.text(
            "SELECT traceparent FROM mailbox WHERE thread_id = :t"), {"t": thread.id})
        assert [r.traceparent for r in rows] == [None]
