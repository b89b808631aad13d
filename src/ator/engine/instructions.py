"""The editable prompt layers: the org policy (admins) and a thread's instructions
(members), each versioned (layer: engine; imports store).

Who may edit is decided by the API's role check; this service adds nothing a caller could
bypass: every call is scoped to the caller's org, and a thread's layer is only found on a
live thread of that org. A turn reads the layers in force when it starts (store/turns.py),
so an edit applies from the next turn.
"""

from __future__ import annotations

from uuid import UUID

from ator.store import layer_versions as layer_store
from ator.store.database import Database
from ator.store.layer_versions import ORG_POLICY, THREAD, LayerText, LayerVersion
from ator.store.scope import Scope

__all__ = ["LayerText", "LayerVersion", "Prompts"]


class Prompts:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def policy(self, scope: Scope) -> LayerText:
        return await layer_store.get_layer(self._db, scope, ORG_POLICY)

    async def set_policy(self, scope: Scope, text: str, *, replace: bool = False,
                         if_version: int | None = None) -> LayerText:
        """Raises Conflict when `if_version` is not the version in force."""
        return await layer_store.set_layer(self._db, scope, ORG_POLICY, text, replace=replace,
                                            if_version=if_version)

    async def policy_versions(self, scope: Scope, *, limit: int = 50) -> list[LayerVersion]:
        return await layer_store.layer_versions(self._db, scope, ORG_POLICY, limit=limit)

    async def instructions(self, scope: Scope, thread_id: UUID) -> LayerText:
        """Raises NotFound for another org's or a deleted thread."""
        return await layer_store.get_layer(self._db, scope, THREAD, thread_id=thread_id)

    async def set_instructions(self, scope: Scope, thread_id: UUID, text: str, *,
                               if_version: int | None = None) -> LayerText:
        """Raises NotFound (not this org's thread) and Conflict (`if_version`)."""
        return await layer_store.set_layer(self._db, scope, THREAD, text, thread_id=thread_id,
                                            if_version=if_version)

    async def instruction_versions(self, scope: Scope, thread_id: UUID, *,
                                   limit: int = 50) -> list[LayerVersion]:
        await self.instructions(scope, thread_id)  # NotFound first
        return await layer_store.layer_versions(self._db, scope, THREAD, thread_id=thread_id,
                                                 limit=limit)
