"""Traces: OpenTelemetry spans for requests, turns, model calls, tool calls and jobs (layer:
obs; imports opentelemetry, ator.settings).

Off unless the operator configures an OTLP endpoint (`otel_endpoint`), and then free when
off: every entry point here first reads one module attribute (`_tracer`) and, when it is
None, returns a shared no-op without touching the OpenTelemetry SDK or API — no span
object, no context attach, no id generation on the hot path. That attribute is the one
process-wide value in ator: OpenTelemetry's own tracer provider is process-wide by design,
and a hot-path check must be one attribute read.

Across processes a trace travels as a W3C `traceparent` string: written with the mailbox
item a request posts and with the job it enqueues (`traceparent()`), and read back by the
replica that runs the turn or the job (`span(..., parent=traceparent)`), so a turn posted
on one replica and run on another is one trace. The log formatter adds `trace_id` beside
the request id (`log_ids()`).

Names and attributes follow the GenAI semantic conventions where they apply: a model call
is `chat {model}` with `gen_ai.operation.name`, `gen_ai.provider.name`,
`gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.usage.input_tokens`,
`gen_ai.usage.output_tokens`; the cost ator priced is `ator.cost_usd`. A tool call is
`execute_tool {name}` with `gen_ai.tool.name` and `gen_ai.tool.call.id`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ator.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

__all__ = ["NOOP", "configure", "configure_from", "enabled", "log_ids", "shutdown", "span",
           "traceparent", "use"]

_tracer: Tracer | None = None
_provider: TracerProvider | None = None

AttrValue = str | bool | int | float


class _NoopSpan:
    """What `span()` is when tracing is off: its own context manager, yielding itself, and
    a span that accepts and drops everything."""

    __slots__ = ()

    def __enter__(self) -> _NoopSpan:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        return None

    def record_error(self, message: str) -> None:
        return None

    def rename(self, name: str) -> None:
        return None


NOOP = _NoopSpan()


class _Span:
    """A thin wrapper so callers never import OpenTelemetry themselves."""

    __slots__ = ("_span",)

    def __init__(self, otel_span: Any) -> None:
        self._span = otel_span

    def set_attribute(self, key: str, value: Any) -> None:
        if value is not None:
            self._span.set_attribute(key, value)

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def rename(self, name: str) -> None:
        self._span.update_name(name)

    def record_error(self, message: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._span.set_status(Status(StatusCode.ERROR, message))


def enabled() -> bool:
    return _tracer is not None


def use(provider: TracerProvider | None) -> None:
    """Trace into `provider` (tests: one with an in-memory exporter), or stop (None)."""
    global _tracer, _provider
    _provider = provider
    _tracer = provider.get_tracer("ator") if provider is not None else None


def configure(endpoint: str | None, *, service: str, instance: str,
              headers: Mapping[str, str] | None = None) -> None:
    """Export spans by OTLP/HTTP to `endpoint` (the operator's collector, e.g.
    `http://collector:4318/v1/traces`) in batches off the event loop; nothing when None."""
    if not endpoint:
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create(
        {"service.name": service, "service.instance.id": instance}))
    provider.add_span_processor(BatchSpanProcessor(
        OTLPSpanExporter(endpoint=endpoint, headers=dict(headers or {}))))
    use(provider)


def configure_from(settings: Settings) -> None:
    """`configure` from the operator's settings (`otel_endpoint`, `otel_service_name`)."""
    import os
    import socket

    configure(settings.otel_endpoint, service=settings.otel_service_name,
              instance=settings.owner_id or f"{socket.gethostname()}:{os.getpid()}")


def shutdown() -> None:
    """Flush and stop the exporter (process exit)."""
    if _provider is not None:
        _provider.shutdown()
    use(None)


def _parent(traceparent: str | None) -> Any:
    if not traceparent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def span(name: str, attributes: Mapping[str, AttrValue | None] | None = None, *,
         parent: str | None = None, kind: str = "internal",
         start_time: int | None = None) -> AbstractContextManager[_Span | _NoopSpan]:
    """A span around the block, current inside it (children nest under it). `parent` is a
    `traceparent` from another process (then it is the parent instead of the current span);
    `kind` is internal, server, client or consumer; `start_time` in ns since the epoch.
    An exception leaving the block marks the span as an error. When tracing is off this is
    one attribute read and the shared no-op (itself a context manager)."""
    if _tracer is None:
        return NOOP
    return _live(_tracer, name, attributes, parent, kind, start_time)


@contextlib.contextmanager
def _live(tracer: Tracer, name: str, attributes: Mapping[str, AttrValue | None] | None,
          parent: str | None, kind: str, start_time: int | None) -> Iterator[_Span]:
    from opentelemetry.trace import SpanKind

    kinds = {"internal": SpanKind.INTERNAL, "server": SpanKind.SERVER,
             "client": SpanKind.CLIENT, "consumer": SpanKind.CONSUMER}
    attrs = {k: v for k, v in (attributes or {}).items() if v is not None}
    with tracer.start_as_current_span(name, context=_parent(parent), kind=kinds[kind],
                                      attributes=attrs, start_time=start_time) as otel_span:
        yield _Span(otel_span)


def traceparent() -> str | None:
    """The current span as a W3C `traceparent`, to carry to another process (None when
    tracing is off or no span is current)."""
    if _tracer is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def log_ids() -> dict[str, str]:
    """`trace_id` (and `span_id`) of the current span, for log lines; {} when off."""
    if _tracer is None:
        return {}
    from opentelemetry.trace import get_current_span

    ctx = get_current_span().get_span_context()
    if not ctx.is_valid:
        return {}
    return {"trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}"}
