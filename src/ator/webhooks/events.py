"""The event types ator sends to webhook endpoints (layer: webhooks; imports ator.errors).

`CATALOG` is what the engine's own features emit. A feature in another extension adds its
type in one line, `EventTypes.register(EventType(name, description))` on the service
(`Ator.service(EventTypes)`, or `Kernel.services` at run time), or by adding it here; the
event itself is written with `store.webhooks.emit` in the transaction of what it reports.
An endpoint's filter may name only registered types; with no filter it gets them all.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ator.errors import ConfigError, ValidationFailed

__all__ = ["CATALOG", "EventType", "EventTypes"]


@dataclass(frozen=True, slots=True)
class EventType:
    name: str
    description: str


CATALOG = (
    EventType("turn.ended", "A turn ended (any status), with its usage and cost."),
    EventType("budget.reached", "A turn ended because a budget or spending cap was reached."),
    EventType("approval.requested", "A turn ended waiting: tool calls it made await a "
                                    "person's decision (GET /v1/approvals)."),
    EventType("run.ended", "A workflow run ended: succeeded, failed or cancelled."),
    EventType("analysis.generated", "An analysis was stored (its kind's `<kind>_generated`), "
                                    "with its output, verdict, model and cost."),
    EventType("endpoint.disabled", "One of the org's webhook endpoints was disabled (410, "
                                   "failing for too long, or by an admin)."),
)


class EventTypes:
    """The registry of known event types (the engine's own, then each feature's)."""

    def __init__(self, types: Iterable[EventType] = CATALOG) -> None:
        self._types: dict[str, EventType] = {}
        for t in types:
            self.register(t)

    def register(self, event_type: EventType) -> None:
        """Add a type. One name registered twice is a configuration error."""
        if event_type.name in self._types:
            raise ConfigError(f"webhook event type {event_type.name!r} is registered twice")
        self._types[event_type.name] = event_type

    def check(self, names: Iterable[str]) -> list[str]:
        """The filter as stored (sorted, unique). Raises ValidationFailed (422
        `webhook_event_type_unknown`)."""
        wanted = set(names)
        unknown = sorted(wanted - set(self._types))
        if unknown:
            raise ValidationFailed(f"unknown event types {unknown}; known: {list(self._types)}",
                                   code="webhook_event_type_unknown")
        return sorted(wanted)

    def __iter__(self) -> Iterator[EventType]:
        return iter(self._types.values())

    def __contains__(self, name: object) -> bool:
        return name in self._types
