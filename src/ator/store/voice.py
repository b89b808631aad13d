"""Voice mode and the text of a reply (layer: store; imports sqlalchemy, ator.store.*)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ator.errors import NotFound
from ator.store.database import Database
from ator.store.scope import Scope

__all__ = ["reply_text", "set_voice"]

_SET = sa.text("""
UPDATE threads SET voice = :voice
 WHERE id = :id AND org_id = :org_id AND deleted_at IS NULL
RETURNING id
""")

# The assistant events of one turn (by default the thread's latest turn that replied), the
# thread checked to be this org's and not in the trash.
_REPLY = sa.text("""
WITH t AS (SELECT id FROM threads WHERE id = :id AND org_id = :org_id AND deleted_at IS NULL),
pick AS (
  SELECT COALESCE(CAST(:turn_id AS uuid),
                  (SELECT e.turn_id FROM events e, t
                    WHERE e.thread_id = t.id AND e.kind = 'assistant'
                    ORDER BY e.seq DESC LIMIT 1)) AS turn_id
)
SELECT (SELECT count(*) FROM t) AS found, pick.turn_id, e.data
  FROM pick LEFT JOIN events e
    ON e.thread_id = :id AND e.org_id = :org_id AND e.kind = 'assistant'
   AND e.turn_id = pick.turn_id AND EXISTS (SELECT 1 FROM t)
 ORDER BY e.seq
""")


async def set_voice(db: Database, scope: Scope, thread_id: UUID, voice: bool) -> None:
    """Turn the thread's voice mode on or off. Raises NotFound (another org's, trashed)."""
    if not await db.write(_SET, {"id": thread_id, "org_id": scope.org_id, "voice": voice}):
        raise NotFound("thread not found")


async def reply_text(db: Database, scope: Scope, thread_id: UUID,
                     turn_id: UUID | None = None) -> tuple[UUID | None, str]:
    """(turn id, the text its assistant steps wrote) of `turn_id`, or of the thread's
    latest reply; (None, "") when there is none. Raises NotFound for no such thread."""
    rows = await db.read(_REPLY, {"id": thread_id, "org_id": scope.org_id,
                                  "turn_id": turn_id})
    if not rows or not rows[0].found:
        raise NotFound("thread not found")
    parts: list[str] = []
    for row in rows:
        data: Any = row.data
        if not isinstance(data, dict):
            continue
        parts.extend(b.get("text", "") for b in data.get("content", [])
                     if isinstance(b, dict) and b.get("type") == "text")
    return rows[0].turn_id, "\n".join(p for p in parts if p.strip())
