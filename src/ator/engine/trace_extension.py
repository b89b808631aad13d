"""Tracing across processes as an extension of the engine (layer: engine; imports
agent.extension): a turn continues the trace of the request that posted what it takes.

The mailbox row keeps the W3C `traceparent` of the request that wrote it (store/mailbox.py);
this extension's per-turn state reads the first one among the items the turn takes, in its
start statement, and the runner's turn span takes it as its parent (`SpanParent`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ator.agent.extension import Extension, Kernel, TurnField

__all__ = ["TracingExtension", "TurnTrace"]

# The first traceparent among the items taken, in the order they become events.
_FIRST_PARENT = ("(array_agg(d.traceparent ORDER BY d.src, d.created_at, d.id)"
                 " FILTER (WHERE d.traceparent IS NOT NULL))[1]")


@dataclass(frozen=True, slots=True)
class TurnTrace:
    """The trace a turn continues (a turn carries this only when one was posted)."""

    parent: str

    @staticmethod
    def build(value: Any) -> TurnTrace | None:
        return TurnTrace(str(value)) if value else None

    def span_parent(self) -> str:
        return self.parent


class TracingExtension(Extension):
    name = "tracing"

    def __init__(self, kernel: Kernel) -> None:
        del kernel  # it needs nothing beyond the turn's own items

    def fields(self) -> Sequence[TurnField]:
        return [TurnField("trace", _FIRST_PARENT, TurnTrace.build, over="items")]
