"""Following one sent message to the end of the turn that took it (layer: engine; imports
nothing of ator beyond the event wire format's shape).

Turns coalesce messages, so a sender learns which turn took its message from the `message`
event carrying its mailbox id, then collects that turn's events until its `turn_ended`. The
API's `ask`, the CLI (in-process and over HTTP) and the coming socket clients all feed event
frames (the one frame format of engine/wire.py) into one `TurnFollow`; it ignores frames it has
already seen, so live notices and a catch-up read from the database can overlap freely.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["TurnFollow"]


class TurnFollow:
    def __init__(self, mailbox_id: str, *, after_seq: int = 0) -> None:
        self.mailbox_id = mailbox_id
        self.seq = after_seq  # the highest seq fed so far
        self.turn_id: str | None = None
        self.frames: list[dict[str, Any]] = []  # our turn's frames, in order
        self.ended: dict[str, Any] | None = None  # the turn_ended data, once it came

    @property
    def done(self) -> bool:
        return self.ended is not None

    def feed(self, frames: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Take frames in seq order; returns those that belong to our turn and are new."""
        mine: list[dict[str, Any]] = []
        for frame in frames:
            seq = int(frame["seq"])
            if seq <= self.seq or self.ended is not None:
                continue
            self.seq = seq
            record = frame["data"]
            data = record.get("data") or {}
            if self.turn_id is None:
                if frame["type"] == "message" and data.get("mailbox_id") == self.mailbox_id:
                    self.turn_id = str(record["turn_id"])
                    mine.append(frame)
                continue
            if not self._ours(frame["type"], record):
                continue
            mine.append(frame)
            if frame["type"] == "turn_ended":
                self.ended = dict(data)
        self.frames.extend(mine)
        return mine

    def _ours(self, kind: str, record: dict[str, Any]) -> bool:
        # A turn_ended names its turn in its data: the one closing a lost turn is written by
        # the next turn, so its own turn_id column is the next turn's.
        if kind == "turn_ended":
            return (record.get("data") or {}).get("turn_id") == self.turn_id
        return record.get("turn_id") == self.turn_id

    def text(self) -> str:
        """The turn's reply: the text of its assistant events, interrupted ones included."""
        return "\n".join(
            b["text"]
            for f in self.frames if f["type"] == "assistant"
            for b in (f["data"].get("data") or {}).get("content", []) if b.get("type") == "text"
        )
