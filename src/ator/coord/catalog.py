"""The "an org's tool catalog changed" notice, on the coordinator (layer: coord; imports
coord.base, errors).

What an org may call outside a turn (its upstream MCP servers, its published workflows…)
changes when someone edits it, on whichever replica served that edit. The service that made
the change calls `catalog_changed` after its write committed; whoever serves catalogs to
outside clients (the MCP gateway's `notifications/tools/list_changed`) subscribes to
`catalog_channel(org_id)` on every replica. A lost notice costs a stale list until the
client lists again, never a wrong call (every call is checked against the org's tools as
they are), so a coordinator that is down is logged, not raised.
"""

from __future__ import annotations

import logging
from uuid import UUID

from ator.coord.base import Coordinator
from ator.errors import CoordinationError

__all__ = ["catalog_changed", "catalog_channel"]

log = logging.getLogger(__name__)


def catalog_channel(org_id: UUID) -> str:
    return f"catalog:{org_id.hex}"


async def catalog_changed(coord: Coordinator | None, org_id: UUID, what: str) -> None:
    """Tell every replica that the org's catalog changed (`what`: which kind of source)."""
    if coord is None:
        return
    try:
        await coord.publish(catalog_channel(org_id), what)
    except CoordinationError as exc:
        log.warning("catalog change of org %s not announced: %s", org_id, exc.message)
