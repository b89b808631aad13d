"""The one frame format of every transport and the coordinator channels it travels on (layer:
engine; imports jsonenc, store.records, providers.base).

Every reader — the HTTP API's event pages and long-poll, SSE, the socket gateway, the CLI, and
the notices between replicas — sees the same versioned frame:

    {"v": 1, "seq": int | None, "type": str, "data": {...}}

- a persisted event: `seq` its seq, `type` its kind, `data` its record
  `{"seq", "kind", "data", "turn_id", "created_at", "thread_id"}` (`event_frame`);
- a batch of token deltas (never persisted, volatile): `seq` None, `type` "delta", `data`
  `{"thread_id", "deltas": [delta, …]}` where a delta is
  `{"kind": "delta", "ephemeral": true, "turn_id", "type": "TextDelta" | …, ...fields}`
  (`delta_frame`, of what `delta` makes);
- a turn starting or ending, for the org room: `seq` None, `type` "turn.started" |
  "turn.ended" (`turn_frame`);
- an error a reader must act on: `seq` None, `type` "error", `data` `{"thread_id", "code",
  "status", "detail"}` (`error_frame`; for a run's room `{"run_id", ...}`, `run_error_frame`);
- a persisted event of a workflow run, for its `run:<id>` room: `seq` its per-run seq, `type`
  its kind, `data` `{"seq", "kind", "data", "created_at", "run_id"}` (`run_frame`).

A change of shape that an old client could misread bumps `FRAME_VERSION`.

Channels, all here: `thread:<id>` carries notices of committed events (a notice is
`{"org_id", "thread_id", "seq", "frames": [event frame, …]}`, published only after the
commit, so a reader may trust it), `deltas:<thread id>` carries coalesced token deltas (a JSON
list of deltas), `ator:abort` carries stop requests to whichever replica runs the turn, and
`ator:deltas-wanted` carries the id of a thread someone just started listening to the deltas
of (a turn whose deltas reached nobody stops publishing them until then: see engine.publish).
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
    "FRAME_VERSION",
    "delta",
    "delta_channel",
    "delta_frame",
    "error_frame",
    "event_frame",
    "frame",
    "notice",
    "run_error_frame",
    "run_frame",
    "thread_channel",
    "turn_frame",
]

FRAME_VERSION = 1

ABORT_CHANNEL = "ator:abort"
DELTAS_WANTED_CHANNEL = "ator:deltas-wanted"


def thread_channel(thread_id: UUID | str) -> str:
    return f"thread:{thread_id}"


def delta_channel(thread_id: UUID | str) -> str:
    return f"deltas:{thread_id}"


def frame(type: str, data: dict[str, Any], seq: int | None = None) -> dict[str, Any]:
    """A frame of any type (see the module for the types there are)."""
    return {"v": FRAME_VERSION, "seq": seq, "type": type, "data": data}


def event_frame(thread_id: UUID | str, e: Event) -> dict[str, Any]:
    """The frame of one persisted event of `thread_id`."""
    return {"v": FRAME_VERSION, "seq": e.seq, "type": e.kind,
            "data": {"seq": e.seq, "kind": e.kind, "data": e.data,
                     "turn_id": str(e.turn_id) if e.turn_id else None,
                     "created_at": e.created_at.isoformat(), "thread_id": str(thread_id)}}


def delta_frame(thread_id: UUID | str, deltas: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The frame of a batch of token deltas (each as made by `delta`)."""
    return frame("delta", {"thread_id": str(thread_id), "deltas": list(deltas)})


def turn_frame(thread_id: UUID | str, e: Event) -> dict[str, Any] | None:
    """The org room's frame for a turn starting or ending (None for other events)."""
    data = e.data or {}
    if e.kind == "turn_started":
        return frame("turn.started", {
            "thread_id": str(thread_id), "turn_id": data.get("turn_id"), "busy": True,
            "parent_id": data.get("parent_id"), "root_id": data.get("root_id")})
    if e.kind == "turn_ended":
        return frame("turn.ended", {
            "thread_id": str(thread_id), "turn_id": data.get("turn_id"), "busy": False,
            "status": data.get("status"), "stop_reason": data.get("stop_reason"),
            "steps": data.get("steps"), "usage": data.get("usage"),
            "cost_usd": data.get("cost_usd"), "held": data.get("held") or []})
    return None


def error_frame(thread_id: UUID | str, code: str, status: int, detail: str) -> dict[str, Any]:
    return frame("error", {"thread_id": str(thread_id), "code": code, "status": status,
                           "detail": detail})


def run_frame(run_id: UUID | str, e: Any) -> dict[str, Any]:
    """The frame of one persisted event of a workflow run (a row of `seq, kind, data,
    created_at`)."""
    return {"v": FRAME_VERSION, "seq": int(e["seq"]), "type": str(e["kind"]),
            "data": {"seq": int(e["seq"]), "kind": str(e["kind"]), "data": e["data"],
                     "created_at": e["created_at"].isoformat(), "run_id": str(run_id)}}


def run_error_frame(run_id: UUID | str, code: str, status: int, detail: str) -> dict[str, Any]:
    return frame("error", {"run_id": str(run_id), "code": code, "status": status,
                           "detail": detail})


def notice(org_id: UUID, thread_id: UUID, events: Sequence[Event]) -> str:
    """The coordinator message announcing committed events."""
    return jsonenc.dumps({
        "org_id": str(org_id), "thread_id": str(thread_id), "seq": events[-1].seq,
        "frames": [event_frame(thread_id, e) for e in events],
    })


_FIELDS: dict[type, tuple[str, ...]] = {}


def delta(turn_id: UUID, event: StreamEvent) -> dict[str, Any]:
    """One token delta of a `delta_frame` (what the deltas channel carries a list of)."""
    kind = type(event)
    names = _FIELDS.get(kind)
    if names is None:  # a shallow read of the event's fields (it is encoded right away)
        # Usage is the record's; a provider's session state is for it alone, never shown.
        names = _FIELDS[kind] = tuple(f.name for f in fields(event)
                                      if f.name not in ("usage", "session"))
    values = {name: getattr(event, name) for name in names}
    return {"kind": "delta", "ephemeral": True, "turn_id": str(turn_id),
            "type": kind.__name__, **values}
