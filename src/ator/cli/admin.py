"""`ator admin`: orgs and API keys, straight on the database (layer: cli; imports
engine.runtime, api.app for the bootstrap key, store, cli.*).

For the operator at the machine, before or beside the HTTP API: the runtime is opened without
its engine (`Ator.open(settings, engine=False)`), so these commands run no turns and can be
used while servers are running. A key is printed once, at creation; only its hash is stored.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from decimal import Decimal, InvalidOperation
from typing import Annotated, TypeVar
from uuid import UUID

import typer
from rich.table import Table
from rich.text import Text

from ator.cli.edge import load_settings, user_errors
from ator.cli.render import console, err_console, fail, money
from ator.engine.access import Access
from ator.engine.runtime import Ator
from ator.engine.tenancy import Tenancy
from ator.security.roles import ROLES
from ator.store.records import ApiKey
from ator.store.scope import Scope

__all__ = ["admin_app"]

admin_app = typer.Typer(help="Manage orgs and API keys directly on the database.",
                        no_args_is_help=True, pretty_exceptions_show_locals=False)

T = TypeVar("T")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+")  # what the HTTP API accepts


def _run(work: Callable[[Ator], Awaitable[T]]) -> T:
    settings = load_settings()

    async def run() -> T:
        ator = await Ator.open(settings, engine=False)
        try:
            return await work(ator)
        finally:
            await ator.close()

    with user_errors(settings):
        return asyncio.run(run())
    raise AssertionError("unreachable")  # user_errors exits on every error it catches


def _usd(text: str | None, option: str) -> Decimal | None:
    if text is None:
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        fail(f"{option} must be a number of USD, got {text!r}")
    if not value.is_finite() or value < 0:
        fail(f"{option} must be a non-negative number of USD")
    if value >= Decimal(10) ** 8:  # NUMERIC(14, 6)
        fail(f"{option} must be below 100000000 USD")
    return value


def _money(value: Decimal | None, none: str = "none") -> str:
    return money(value) if value is not None else none


@admin_app.command("create-org")
def create_org(
    name: Annotated[str, typer.Argument(help="The org's name.")],
    budget: Annotated[str | None, typer.Option(
        help="The org's own monthly budget in USD, at most the ceiling (default: none).")
    ] = None,
    ceiling: Annotated[str | None, typer.Option(
        help="The operator's monthly ceiling in USD, which the org cannot raise or clear "
             "(default: none).")] = None,
) -> None:
    """Create an org (a tenant). Prints its id."""
    monthly, top = _usd(budget, "--budget"), _usd(ceiling, "--ceiling")
    org = _run(lambda ator: ator.service(Tenancy).create_org(name, monthly_budget_usd=monthly,
                                                 budget_ceiling_usd=top))
    err_console.print(f"created org {org.name!r} (monthly budget "
                      f"{_money(org.monthly_budget_usd)}, ceiling "
                      f"{_money(org.budget_ceiling_usd)})")
    console.print(str(org.id))  # alone on stdout, so `ORG=$(ator admin create-org …)` works


@admin_app.command("set-ceiling")
def set_ceiling(
    org: Annotated[UUID, typer.Argument(help="The org's id.")],
    ceiling: Annotated[str, typer.Argument(help="Monthly ceiling in USD, or 'none' to clear.")],
) -> None:
    """Set or clear the operator's monthly budget ceiling of an org."""
    top = None if ceiling.lower() == "none" else _usd(ceiling, "the ceiling")
    found = _run(lambda ator: ator.service(Tenancy).set_ceiling(Scope(org), top))
    err_console.print(f"org {found.name!r}: ceiling {_money(found.budget_ceiling_usd)}, "
                      f"limit in force {_money(found.budget_limit_usd)}")


@admin_app.command("create-key")
def create_key(
    org: Annotated[UUID, typer.Option(help="The org the key acts in.")],
    email: Annotated[str, typer.Option(help="The key's user (created in the org if new).")],
    role: Annotated[str, typer.Option(help="admin, member or viewer.")],
    name: Annotated[str, typer.Option(help="A label for the key.")] = "cli",
) -> None:
    """Create an API key for a user of an org. The key is printed once."""
    if role not in ROLES:
        fail(f"--role must be one of {', '.join(ROLES)}")
    if not _EMAIL.fullmatch(email):
        fail("--email must be an email address")

    async def work(ator: Ator) -> tuple[ApiKey, str]:
        scope = Scope(org)
        await ator.service(Tenancy).org(scope)  # NotFound: a clear error, not a bare insert
        return await ator.service(Access).issue_key(scope, email=email, role=role, name=name)

    record, key = _run(work)
    err_console.print(f"created {record.role} key {record.name!r} ({record.id}) for {email} "
                      f"in org {record.org_id}; it is shown once:")
    # The key alone on stdout, so `KEY=$(ator admin create-key …)` works.
    console.print(key, markup=False, soft_wrap=True)


@admin_app.command("list-orgs")
def list_orgs() -> None:
    """List every org with its budget and ceiling."""
    found = _run(lambda ator: ator.service(Tenancy).all_orgs())
    table = Table()
    for column in ("id", "name", "monthly budget", "ceiling", "created"):
        table.add_column(column, no_wrap=column != "name")
    for o in found:
        table.add_row(str(o.id), o.name, _money(o.monthly_budget_usd, "—"),
                      _money(o.budget_ceiling_usd, "—"), o.created_at.strftime("%Y-%m-%d %H:%M"))
    console.print(table)


@admin_app.command()
def bootstrap() -> None:
    """Create the operator org and its admin key if the database has no key yet."""
    made = _run(lambda ator: ator.service(Access).bootstrap())
    key = made[0] if made is not None else None
    if key is None:
        err_console.print(Text("API keys exist already: nothing to do (create more with "
                               "`ator admin create-key`).", style="yellow"))
        return
    err_console.print("created the operator org and its admin API key; it is shown once:")
    console.print(key, markup=False, soft_wrap=True)
