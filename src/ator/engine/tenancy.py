"""Orgs, their budgets, secrets and usage (layer: engine; imports store, security).

The service the HTTP API and the CLI manage tenants through. Budgets have two levels: the
operator's ceiling per org, which only the operator sets or clears, and the org's own lower
monthly budget (above the ceiling: 422). Secrets are write-only: names can be listed, values
never leave the process except into a provider's credential.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any
from uuid import UUID

from ator.errors import Forbidden, NotFound
from ator.security.crypto import MasterKey
from ator.store import orgs as org_store
from ator.store import secrets as secret_store
from ator.store import usage as usage_store
from ator.store.database import Database
from ator.store.records import Org, Principal
from ator.store.scope import Scope

__all__ = ["Tenancy"]

_UNSET: Any = object()


class Tenancy:
    def __init__(self, db: Database, master_key: MasterKey) -> None:
        self._db = db
        self._master_key = master_key

    # Orgs ------------------------------------------------------------------------------

    async def create_org(
        self, name: str, *, monthly_budget_usd: Decimal | None = None,
        budget_ceiling_usd: Decimal | None = None,
    ) -> Org:
        return await org_store.create_org(self._db, name, monthly_budget_usd=monthly_budget_usd,
                                          budget_ceiling_usd=budget_ceiling_usd)

    async def org(self, scope: Scope) -> Org:
        return await org_store.get_org(self._db, scope)

    async def all_orgs(self) -> list[Org]:
        """Every org (the operator's CLI, acting on the database directly)."""
        return await org_store.list_orgs(self._db)

    async def orgs(self, principal: Principal) -> list[Org]:
        """Every org for the operator's admins; one's own org for anyone else."""
        if principal.operator and principal.role == "admin":
            return await org_store.list_orgs(self._db)
        return [await org_store.get_org(self._db, principal.scope)]

    def scope_for(self, principal: Principal, org_id: UUID) -> Scope:
        """The operator may act on any org; anyone else only on their own (404 otherwise)."""
        if org_id != principal.org_id and not principal.operator:
            raise NotFound("org not found")
        return Scope(org_id, principal.user_id, principal.role)

    async def update_budgets(
        self, principal: Principal, scope: Scope, *, monthly_budget_usd: Any = _UNSET,
        budget_ceiling_usd: Any = _UNSET,
    ) -> Org:
        """Change what was given (a value, or None to clear); leave the rest."""
        if budget_ceiling_usd is not _UNSET:
            if not principal.operator:
                raise Forbidden("only the operator can set or clear an org's budget ceiling",
                                code="budget_ceiling_is_operators")
            await org_store.set_org_ceiling(self._db, scope, budget_ceiling_usd)
        if monthly_budget_usd is not _UNSET:
            await org_store.set_org_budget(self._db, scope, monthly_budget_usd)
        return await org_store.get_org(self._db, scope)

    async def set_ceiling(self, scope: Scope, budget_ceiling_usd: Decimal | None) -> Org:
        """The operator's ceiling (CLI: the operator acts on the database directly)."""
        return await org_store.set_org_ceiling(self._db, scope, budget_ceiling_usd)

    # Secrets ---------------------------------------------------------------------------

    async def put_secret(self, scope: Scope, name: str, value: str) -> None:
        await secret_store.put_secret(self._db, self._master_key, scope, name, value)

    async def secret_names(self, scope: Scope) -> list[str]:
        return await secret_store.list_secret_names(self._db, scope)

    async def delete_secret(self, scope: Scope, name: str) -> None:
        if not await secret_store.delete_secret(self._db, scope, name):
            raise NotFound("secret not found")

    # Usage -----------------------------------------------------------------------------

    async def usage(self, scope: Scope, *, month: date, group: str) -> list[dict[str, Any]]:
        """Tokens and USD of one month, grouped by org, thread or setup. Raises ValueError
        for a month whose end cannot be represented."""
        usage_store.month_bounds(month)
        return await usage_store.usage(self._db, scope, month=month, group=group)

    async def mailbox_depth(self) -> int:
        """Items waiting in every mailbox (all orgs; for metrics)."""
        return await usage_store.mailbox_depth(self._db)

    async def mailbox_lag(self) -> float:
        """Seconds the oldest waiting mailbox item has waited (all orgs; for metrics)."""
        return await usage_store.mailbox_lag(self._db)
