"""Daily caps: USD per setup and per org since midnight in the org's time zone, beside the
monthly budget (layer: engine; imports agent, store).

A setup's cap is its `config.daily_budget_usd`; the org's is set by its admin
(`DailyCaps.set_org`, kept in `orgs.settings` with the org's IANA time zone, UTC when none).
Both are read in the turn's start statement (a `TurnField`: no round trip); a turn with
either cap checks, before each model call, what was billed since the org's midnight
(`model_calls`, one statement) and ends `budget` naming the cap it reached. The check is
made before a call, not reserved like the monthly ledger: a call in flight may end above the
cap, and the next one is refused. Applies to every provider.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ator.agent.extension import Extension, Kernel, TurnField
from ator.agent.hooks import LoopHook, StopTurn
from ator.agent.state import TurnContext, TurnState
from ator.cost.price import usd_amount
from ator.providers.base import ModelRequest
from ator.security.limits import refuse
from ator.store import orgs as org_store
from ator.store import usage as usage_store
from ator.store.database import Database
from ator.store.scope import Scope

__all__ = ["DailyCaps", "DailyCapsExtension", "DayLimits", "midnight"]

_FIELD = TurnField(
    "daily_caps",
    "jsonb_build_object('org', o.settings ->> 'daily_budget_usd', 'tz', "
    "o.settings ->> 'time_zone', 'setup', s.config ->> 'daily_budget_usd')",
    lambda raw: DayLimits.of(raw))


@dataclass(frozen=True, slots=True)
class DayLimits:
    """A turn's daily caps (None: no cap of that kind) and the zone its day starts in."""

    org_usd: Decimal | None
    setup_usd: Decimal | None
    time_zone: str = "UTC"

    @classmethod
    def of(cls, raw: Any) -> DayLimits | None:
        if not isinstance(raw, dict):
            return None
        org, setup = usd_amount(raw.get("org")), usd_amount(raw.get("setup"))
        if org is None and setup is None:
            return None
        return cls(org, setup, str(raw.get("tz") or "UTC"))



def midnight(time_zone: str, now: datetime | None = None) -> datetime:
    """The last midnight in `time_zone` (an unknown zone counts as UTC), as an aware time."""
    try:
        zone: Any = ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        zone = UTC
    local = (now or datetime.now(UTC)).astimezone(zone)
    return datetime.combine(local.date(), time(0), tzinfo=zone)


class DailyGate(LoopHook):
    def __init__(self, db: Database) -> None:
        self.db = db

    def reads_spend(self, turn: TurnContext) -> bool:
        return turn.get(DayLimits) is not None

    async def before_call(self, turn: TurnContext, state: TurnState, request: ModelRequest
                          ) -> ModelRequest:
        limits = turn.get(DayLimits)
        if limits is None:
            return request
        since = midnight(limits.time_zone)
        org, setup = await usage_store.spent_since(self.db, Scope(turn.org_id), since,
                                                   turn.setup_id)
        for who, cap, spent in (("setup", limits.setup_usd, setup),
                                ("org", limits.org_usd, org)):
            if cap is not None and spent >= cap:
                raise StopTurn("budget", f"the {who}'s daily cap of ${cap} is reached: "
                               f"${spent} spent since midnight ({limits.time_zone})")
        return request


class DailyCaps:
    """The org's daily cap, set by its admins."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def set_org(self, scope: Scope, daily_budget_usd: Decimal | None,
                      time_zone: str = "UTC") -> None:
        """Raises ValidationFailed (`invalid_time_zone`, `invalid_cap`)."""
        try:
            ZoneInfo(time_zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise refuse(("time_zone",), "not an IANA time zone", "invalid_time_zone"
                         ) from None
        if daily_budget_usd is not None and not (daily_budget_usd.is_finite()
                                                 and daily_budget_usd >= 0):
            raise refuse(("daily_budget_usd",), "must be a non-negative amount",
                         "invalid_cap")
        await org_store.set_daily_cap(self.db, scope, daily_budget_usd, time_zone)


class DailyCapsExtension(Extension):
    name = "daily_caps"

    def __init__(self, kernel: Kernel) -> None:
        self._db = kernel.db

    def fields(self) -> Sequence[TurnField]:
        return (_FIELD,)

    def hooks(self) -> Sequence[LoopHook]:
        return (DailyGate(self._db),)

    def services(self) -> dict[type, object]:
        return {DailyCaps: DailyCaps(self._db)}
