"""Tools a turn gets only when its setup's tool policy names them: `web_fetch` (layer:
engine; imports store.setups, tools, engine.recent)."""

from __future__ import annotations

from collections.abc import Sequence

from ator.engine.recent import Recent
from ator.store import setups as setup_store
from ator.store.database import Database
from ator.store.scope import Scope
from ator.tools.base import Tool
from ator.tools.toolset import OrgToolScope, ToolScope

__all__ = ["PolicyGated"]


class PolicyGated:
    """Tools a turn gets only when its setup's tool policy names them in `allow` (off by
    default, unlike native tools): `web_fetch`. One setup read per turn."""

    name = "gated"

    def __init__(self, db: Database, tools: Sequence[Tool], ttl: float = 5.0) -> None:
        self.db = db
        self._tools = tuple(tools)
        self.recent = Recent(ttl)

    async def tools(self, scope: ToolScope) -> Sequence[Tool]:
        key = (scope.org_id, scope.setup_id)
        found: tuple[Tool, ...] | None = self.recent.get(key)
        if found is None:
            setup = await setup_store.get_setup(self.db, Scope(scope.org_id), scope.setup_id)
            allow = setup.tool_policy.get("allow") or []
            found = tuple(t for t in self._tools if t.name in allow)
            self.recent.put(key, found)
        return found

    async def org_tools(self, scope: OrgToolScope) -> Sequence[Tool]:
        """Outside a turn the same rule, on the scope's policy: named in `allow`, or not at
        all."""
        allow = scope.policy.allow or []
        return tuple(t for t in self._tools if t.name in allow)
