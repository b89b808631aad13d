"""An org's retention policy: the operator's defaults, the org's own values, and the bounds
(layer: retention; imports ator.errors, ator.settings).

Each class of data has a number of days (`events` may also be 0: kept). The operator sets
the defaults and the bounds (`retention_*` settings); an org admin may set its own values
within the bounds; what the org did not set follows the operator's default.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ator.errors import ValidationFailed
from ator.settings import Settings

__all__ = ["CLASSES", "Policy"]

#: The classes an org's policy names, and what each one removes.
CLASSES: dict[str, str] = {
    "trash_days": "deleted threads (with everything hanging off them) and archived setups",
    "mailbox_days": "mailbox items already consumed by a turn",
    "events_days": "the event log and inspector records of threads idle this long "
                   "(turns and usage stay; 0: kept)",
    "runs_days": "finished workflow runs with their steps and events",
}


@dataclass(frozen=True, slots=True)
class Policy:
    trash_days: int
    mailbox_days: int
    events_days: int
    runs_days: int

    @classmethod
    def defaults(cls, settings: Settings) -> Policy:
        return cls(settings.retention_trash_days, settings.retention_mailbox_days,
                   settings.retention_events_days, settings.retention_runs_days)

    @classmethod
    def effective(cls, settings: Settings, own: dict[str, Any]) -> Policy:
        """The operator's defaults overlaid with the org's own values (kept in bounds: an
        operator who narrowed the bounds since wins)."""
        lo, hi = settings.retention_min_days, settings.retention_max_days
        values = asdict(cls.defaults(settings))
        for name in CLASSES:
            mine = own.get(name)
            if isinstance(mine, int) and not isinstance(mine, bool):
                values[name] = 0 if name == "events_days" and mine == 0 else min(hi, max(lo, mine))
        return cls(**values)

    @staticmethod
    def check(settings: Settings, changes: dict[str, Any]) -> dict[str, int | None]:
        """Validate an org's changes (None: back to the default). Raises ValidationFailed
        (`retention_unknown_class`, `retention_out_of_bounds`)."""
        lo, hi = settings.retention_min_days, settings.retention_max_days
        checked: dict[str, int | None] = {}
        for name, value in changes.items():
            if name not in CLASSES:
                raise ValidationFailed(f"unknown retention class {name!r}; known: "
                                       f"{', '.join(CLASSES)}", code="retention_unknown_class")
            if value is None:
                checked[name] = None
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValidationFailed(f"{name} is a whole number of days",
                                       code="retention_out_of_bounds")
            if name == "events_days" and value == 0:
                checked[name] = 0
                continue
            if not lo <= value <= hi:
                raise ValidationFailed(
                    f"{name} must be between {lo} and {hi} days (the operator's bounds)",
                    code="retention_out_of_bounds")
            checked[name] = value
        return checked

    def days(self) -> dict[str, int]:
        return asdict(self)
