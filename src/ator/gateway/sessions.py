"""Handshake-era MCP sessions any replica can serve (layer: gateway; imports coord.base).

The SDK keeps a handshake-era session in one process's memory, so behind a plain load
balancer a request that lands on another replica gets 404. The gateway therefore runs the
SDK's server stateless (each request served whole, on any replica: the handshake era needs
no state on the server for tools) and owns the session itself:

- an `initialize` without `Mcp-Session-Id` opens one: a fresh id, held on the coordinator as
  a lease whose token is the API key's id and whose TTL is the idle timeout (shared by every
  replica when the coordinator is Redis);
- every later request naming it renews the lease in the same step that checks it belongs to
  the key (`extend`): an unknown, expired or other key's session is a 404, as the spec says;
- DELETE releases it.

The session's id is also the downstream conversation the catalog keys upstream sessions by.
The session's standing GET stream is the gateway's own too (gateway/changes.py: catalog
changes, told on any replica); what is lost is server-to-client *requests* (sampling,
elicitation: the stateless SDK has no back channel for their answers).
"""

from __future__ import annotations

import uuid
from uuid import UUID

from ator.coord.base import Coordinator

__all__ = ["GatewaySessions"]


class GatewaySessions:
    def __init__(self, coord: Coordinator, idle: float) -> None:
        self._coord = coord
        self._idle = idle

    async def open(self, key_id: UUID) -> UUID:
        """A new session for the key; its id (the `Mcp-Session-Id` is its hex)."""
        session = uuid.uuid4()
        if not await self._coord.acquire(_lease(session), str(key_id), self._idle):
            raise RuntimeError("a fresh session id was taken")  # uuid4: does not happen
        return session

    async def touch(self, header: str, key_id: UUID) -> UUID | None:
        """The session `header` names if it is live and the key's (its idle time restarts),
        else None."""
        try:
            session = UUID(hex=header)
        except ValueError:
            return None
        if session.hex != header.lower():
            return None
        ok = await self._coord.extend(_lease(session), str(key_id), self._idle)
        return session if ok else None

    async def close(self, session: UUID, key_id: UUID) -> None:
        await self._coord.release(_lease(session), str(key_id))


def _lease(session: UUID) -> str:
    return f"gateway:session:{session.hex}"
