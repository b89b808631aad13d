"""The durable mailbox of each thread (layer: store; imports sqlalchemy, ator.store.*).

`submit` inserts an item unique per (thread, client_message_id), so a resend, even a
concurrent one, is a no-op that returns the item already there; a client id reused for
different content (or by another sender) is refused as an `idempotency_conflict`. Items are
drained by `store.turns.start_turn`; `notify` and `pending_notices` are the one path of a
notice from a feature (a subagent's or a workflow run's result): an item whose client id is
its claim (`<feature>:<id>`), inserted at most once per thread, and read back between steps
by prefix (agent/notices.py); `pending_threads` lets the reaper find threads with
work that no replica picked up (the replica that took the message died before running it).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ator import jsonenc
from ator.errors import Conflict, NotFound
from ator.obs import tracing
from ator.store.database import Database, first
from ator.store.records import MailboxItem
from ator.store.schema import mailbox
from ator.store.scope import Scope

__all__ = ["Post", "existing", "item_from_record", "notify", "pending_notices",
           "pending_threads", "submit", "submit_post"]


_SUBMIT = sa.text("""
INSERT INTO mailbox (id, org_id, thread_id, client_message_id, kind, content, sender,
                     traceparent)
SELECT :id, t.org_id, t.id, :cmid, :kind, CAST(:content AS jsonb), :sender, :traceparent
  FROM threads t
 WHERE t.id = :thread_id AND t.org_id = :org_id AND t.deleted_at IS NULL
ON CONFLICT ON CONSTRAINT uq_mailbox_thread_client DO NOTHING
RETURNING *
""")


@dataclass(frozen=True, slots=True)
class Post:
    """An item to insert: by `submit` alone, or by the statement that starts a turn of an
    idle thread with it (`store.turns.post_turn`), under the same unique client id."""

    client_message_id: str
    kind: str
    content: dict[str, Any]
    sender: UUID | None
    # The trace of the request posting it: the replica running the turn continues it.
    traceparent: str | None = None
    id: UUID = field(default_factory=uuid.uuid4)

    @classmethod
    def message(cls, scope: Scope, client_message_id: str, text: str) -> Post:
        """A user's text message, sent by the scope's user, in the current trace."""
        return cls(client_message_id, "message",
                   {"role": "user", "content": [{"type": "text", "text": text}]},
                   scope.user_id, tracing.traceparent())

    def params(self, scope: Scope, thread_id: UUID) -> dict[str, Any]:
        return {"id": self.id, "org_id": scope.org_id, "thread_id": thread_id,
                "cmid": self.client_message_id, "kind": self.kind, "sender": self.sender,
                "content": jsonenc.dumps(self.content), "traceparent": self.traceparent}


def item_from_record(r: Any) -> MailboxItem:
    """A MailboxItem from a mailbox row as a record (`RETURNING *`)."""
    return MailboxItem(
        r["id"], r["thread_id"], r["client_message_id"], r["kind"], r["content"], r["sender"],
        r["turn_id"], r["created_at"],
    )


def _item(row: Any) -> MailboxItem:
    return MailboxItem(
        row.id,
        row.thread_id,
        row.client_message_id,
        row.kind,
        row.content,
        row.sender,
        row.turn_id,
        row.created_at,
    )


async def submit(
    db: Database,
    scope: Scope,
    thread_id: UUID,
    *,
    client_message_id: str,
    kind: str,
    content: dict[str, Any],
) -> tuple[MailboxItem, bool]:
    """Insert an item; returns (item, created). A duplicate returns the first item, created
    False. Raises NotFound when the thread is not this org's or is in the trash, and
    Conflict (`idempotency_conflict`) when the first item differs in kind, content or
    sender."""
    return await submit_post(db, scope, thread_id, Post(
        client_message_id, kind, content, scope.user_id, tracing.traceparent()))


async def submit_post(db: Database, scope: Scope, thread_id: UUID,
                      post: Post) -> tuple[MailboxItem, bool]:
    """`submit` of a built `Post`."""
    rows = await db.fetch(_SUBMIT, post.params(scope, thread_id), write=True)
    if rows:
        return item_from_record(rows[0]), True
    return await existing(db, scope, thread_id, post), False


async def existing(db: Database, scope: Scope, thread_id: UUID, post: Post) -> MailboxItem:
    """The item already there under the post's client id (a resend). Raises NotFound when
    there is none (the thread is not this org's or is in the trash), Conflict
    (`idempotency_conflict`) when it differs from the post in kind, content or sender."""
    found = first(
        await db.read(
            sa.select(mailbox).where(
                mailbox.c.thread_id == thread_id,
                mailbox.c.org_id == scope.org_id,
                mailbox.c.client_message_id == post.client_message_id,
            )
        )
    )
    if found is None:
        raise NotFound("thread not found")
    # No race: ON CONFLICT waited for the row that blocked the INSERT to commit, this read
    # (a new statement, so a new snapshot) sees it, and a mailbox row's kind, content and
    # sender never change after it is written.
    if (found.kind, found.content, found.sender) != (post.kind, post.content, post.sender):
        raise Conflict(
            f"client_message_id {post.client_message_id!r} was already used for a different "
            "message in this thread",
            code="idempotency_conflict",
        )
    return _item(found)


async def pending_threads(
    db: Database, *, older_than: float, limit: int = 100
) -> list[tuple[UUID, UUID]]:
    """(org_id, thread_id) of threads with items pending for more than `older_than` seconds
    (system-level, all orgs: for the reaper's sweep)."""
    stmt = sa.text("""
        SELECT DISTINCT org_id, thread_id FROM mailbox
         WHERE turn_id IS NULL AND created_at < now() - make_interval(secs => :age)
         LIMIT :limit
    """)
    rows = await db.read(stmt, {"age": older_than, "limit": limit})
    return [(r.org_id, r.thread_id) for r in rows]


async def notify(db: Database, scope: Scope, thread_id: UUID, *, claim: str,
                 content: dict[str, Any]) -> bool:
    """Insert a notice claimed by `claim` (its client id): True when this call inserted it,
    False when the claim was taken before (whoever raced) or the thread is gone. The insert
    is the claim, so a notice reaches a thread at most once."""
    # The submit's own insert, with no sender: the claim is the client id it is unique by.
    rows = await db.fetch(_SUBMIT, {"id": uuid.uuid4(), "org_id": scope.org_id,
                                    "thread_id": thread_id, "cmid": claim,
                                    "kind": "notification", "sender": None,
                                    "content": jsonenc.dumps(content),
                                    # the job's span (its enqueuer's trace) goes on there
                                    "traceparent": tracing.traceparent()}, write=True)
    return bool(rows)


async def pending_notices(
    db: Database, scope: Scope, thread_id: UUID, prefix: str
) -> list[tuple[UUID, str, dict[str, Any]]]:
    """Notices whose claim starts with `prefix` waiting in the thread's mailbox: (mailbox
    id, client id, content), in the order they were persisted."""
    stmt = sa.text("""
        SELECT id, client_message_id, content FROM mailbox
         WHERE thread_id = :id AND org_id = :org_id AND turn_id IS NULL
           AND kind = 'notification' AND starts_with(client_message_id, :prefix)
         ORDER BY created_at, id
    """)
    rows = await db.fetch(stmt, {"id": thread_id, "org_id": scope.org_id, "prefix": prefix},
                          write=False)
    return [(r["id"], r["client_message_id"], dict(r["content"])) for r in rows]
