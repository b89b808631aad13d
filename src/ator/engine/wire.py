"""The one wire format of thread events and the coordinator channels they travel on (layer:
engine; imports jsonenc, store.records, providers.base).

Every reader — the HTTP API, long-poll, the CLI, notices between replicas, the coming socket
gateway — sees a persisted event as the same dict:

    {"seq": int, "kind": str, "data": {...}, "turn_id": str | None, "created_at": iso8601}

and a token delta (never persisted, marked so) as:

    {"kind": "delta", "ephemeral": true, "turn_id": str, "type": "TextDelta" | …, ...fields}

Channels, all here: `thread:<id>` carries notices of committed events (a notice is
`{"org_id", "thread_id", "seq", "events": [event, …]}`, published only after the commit, so a
reader may trust it), `deltas:<thread id>` carries coalesced token deltas, `ator:abort`
carries stop requests to whichever replica runs the turn, and `ator:deltas-wanted` carries the
id of a thread someone just started listening to the deltas of (a turn whose deltas reached
nobody stops publishing them until then: see engine.publish).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any
from uuid import UUID

from ator import jsonenc
from ator.providers.base import StreamEvent
from ator.store.records import Event

__all__ = [
    "ABORT_CHANNEL",
    "DELTAS_WANTED_CHANNEL",
    "delta_channel",
    "delta_frame",
    "event_frame",
    "notice",
    "thread_channel",
]

ABORT_CHANNEL = "ator:abort"
DELTAS_WANTED_CHANNEL = "ator:deltas-wanted"


def thread_channel(thread_id: UUID | str) -> str:
    return f"thread:{thread_id}"


def delta_channel(thread_id: UUID | str) -> str:
    return f"deltas:{thread_id}"


def event_frame(e: Event) -> dict[str, Any]:
    return {"seq": e.seq, "kind": e.kind, "data": e.data,
            "turn_id": str(e.turn_id) if e.turn_id else None,
            "created_at": e.created_at.isoformat()}


def notice(org_id: UUID, thread_id: UUID, events: Sequence[Event]) -> str:
    """The coordinator message announcing committed events."""
    return jsonenc.dumps({
        "org_id": str(org_id), "thread_id": str(thread_id), "seq": events[-1].seq,
        "events": [event_frame(e) for e in events],
    })


_FIELDS: dict[type, tuple[str, ...]] = {}


def delta_frame(turn_id: UUID, event: StreamEvent) -> dict[str, Any]:
    kind = type(event)
    names = _FIELDS.get(kind)
    if names is None:  # a shallow read of the event's fields (it is encoded right away)
        # Usage is the record's; a provider's session state is for it alone, never shown.
        names = _FIELDS[kind] = tuple(f.name for f in fields(event)
                                      if f.name not in ("usage", "session"))
    values = {name: getattr(event, name) for name in names}
    return {"kind": "delta", "ephemeral": True, "turn_id": str(turn_id),
            "type": kind.__name__, **values}
