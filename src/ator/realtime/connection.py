"""One socket's state and the per-user and per-org socket counts (layer: realtime; imports
store.keys, errors).

A `Connection` holds who is connected (the principal and its key, re-checked on every
command and by a periodic sweep, so a revoked key stops working), and the threads and runs
it follows (realtime.feed, by room name), at most `max_rooms`. What a connection holds in
memory is bounded: its follows and the packets queued for its transport (see
realtime.feed).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from uuid import UUID

from ator.errors import AtorError, RateLimited
from ator.realtime.feed import Follow
from ator.store.records import Principal

__all__ = ["Connection", "SocketCounts", "TooManyRooms", "TooManySockets", "is_org_room",
           "org_room"]


class TooManySockets(RateLimited):
    code = "too_many_sockets"


class TooManyRooms(AtorError):
    kind = "limit"
    code = "too_many_rooms"
    status = 429


ORG_ROOM_PREFIX = "org:"


def org_room(org_id: UUID) -> str:
    """The room of every socket of an org (turns starting and ending, approvals decided)."""
    return f"{ORG_ROOM_PREFIX}{org_id}"


def is_org_room(room: str) -> bool:
    return room.startswith(ORG_ROOM_PREFIX)


@dataclass
class Connection:
    sid: str
    principal: Principal
    key: str
    follows: dict[str, Follow] = field(default_factory=dict)  # by room: thread:<id>, run:<id>

    @property
    def rooms(self) -> list[str]:
        """The rooms this socket is in: joined by the server, never named by the client."""
        return [org_room(self.principal.org_id), f"user:{self.principal.user_id}",
                *self.follows]

    def check_room_limit(self, room: str, max_rooms: int) -> None:
        if room not in self.follows and len(self.follows) >= max_rooms:
            raise TooManyRooms(f"a socket may follow at most {max_rooms} threads and runs "
                               "at once")


class SocketCounts:
    """Sockets open on this replica per user and per org, capped."""

    def __init__(self, *, per_user: int, per_org: int) -> None:
        self.per_user, self.per_org = per_user, per_org
        self._users: Counter[UUID] = Counter()
        self._orgs: Counter[UUID] = Counter()

    def take(self, p: Principal) -> None:
        """Count one more socket for `p`; raises TooManySockets past a cap."""
        if self._users[p.user_id] >= self.per_user:
            raise TooManySockets(f"more than {self.per_user} sockets for this user",
                                 retry_after=5.0)
        if self._orgs[p.org_id] >= self.per_org:
            raise TooManySockets(f"more than {self.per_org} sockets for this org",
                                 retry_after=5.0)
        self._users[p.user_id] += 1
        self._orgs[p.org_id] += 1

    def give_back(self, p: Principal) -> None:
        for counts, key in ((self._users, p.user_id), (self._orgs, p.org_id)):
            counts[key] -= 1
            if counts[key] <= 0:
                del counts[key]
