"""A provider's opaque state per thread (layer: store; imports sqlalchemy, ator.store.*,
ator.jsonenc).

A provider may end a call with state it wants back on the thread's next call (a CLI
runtime's session id, to `--resume`). It is kept per (thread, provider): written by the step
that returned it (`SessionSaved`, a part of that step's one statement, so the state and the
reply that produced it commit together, and only while the turn still runs), and read before
a turn's first call (`load`), for providers whose factory keeps sessions only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar
from uuid import UUID

import sqlalchemy as sa

from ator import jsonenc
from ator.store.database import Database, first
from ator.store.parts import PartSql
from ator.store.schema import provider_sessions
from ator.store.scope import Scope

__all__ = ["SessionSaved", "load"]


async def load(db: Database, scope: Scope, thread_id: UUID, provider: str
               ) -> dict[str, Any] | None:
    """The state `provider` last returned on this thread of the org, or None."""
    row = first(await db.read(
        sa.select(provider_sessions.c.state).where(
            provider_sessions.c.thread_id == thread_id,
            provider_sessions.c.provider == provider,
            provider_sessions.c.org_id == scope.org_id)))
    return None if row is None else dict(row.state)


_SESSION_SAVED = PartSql("session_saved", ctes=("""_session AS (
  INSERT INTO provider_sessions (org_id, thread_id, provider, state)
  SELECT :org_id, :thread_id, :provider, CAST(:state AS jsonb)
   WHERE EXISTS (SELECT 1 FROM _turn)
  ON CONFLICT (thread_id, provider) DO UPDATE
    SET state = EXCLUDED.state, updated_at = now()
   WHERE provider_sessions.org_id = EXCLUDED.org_id
)""",), params=frozenset({"provider", "state"}))


@dataclass(frozen=True, slots=True)
class SessionSaved:
    """A step part: keep `state` as the thread's state for `provider` (replacing the last)."""

    provider: str
    state: dict[str, Any]
    sql: ClassVar[PartSql] = _SESSION_SAVED

    def values(self) -> dict[str, Any]:
        return {"provider": self.provider, "state": jsonenc.dumps(self.state)}
