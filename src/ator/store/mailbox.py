"""The durable mailbox of each thread (layer: store; imports sqlalchemy, ator.store.*).

`submit` inserts an item unique per (thread, client_message_id), so a resend, even a
concurrent one, is a no-op that returns the item already there. Items are drained by
`store.turns.begin_turn`; `pending_threads` lets the reaper find threads with work that no
replica picked up (the replica that took the message died before running it).
"""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB, insert

from ator.errors import NotFound
from ator.store.database import Database
from ator.store.records import MailboxItem
from ator.store.schema import mailbox, threads
from ator.store.scope import Scope

__all__ = ["pending_threads", "submit"]


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
    False. Raises NotFound when the thread is not this org's or is in the trash."""
    source = sa.select(
        sa.literal(uuid.uuid4(), sa.Uuid),
        threads.c.org_id,
        threads.c.id,
        sa.literal(client_message_id),
        sa.literal(kind),
        sa.cast(sa.literal(content, sa.JSON), JSONB),
        sa.literal(scope.user_id, sa.Uuid),
    ).where(
        threads.c.id == thread_id, threads.c.org_id == scope.org_id, threads.c.deleted_at.is_(None)
    )
    stmt = (
        insert(mailbox)
        .from_select(
            ["id", "org_id", "thread_id", "client_message_id", "kind", "content", "sender"], source
        )
        .on_conflict_do_nothing(constraint="uq_mailbox_thread_client")
        .returning(mailbox)
    )
    async with db.begin() as conn:
        row = (await conn.execute(stmt)).first()
        if row is not None:
            return _item(row), True
        existing = (
            await conn.execute(
                sa.select(mailbox).where(
                    mailbox.c.thread_id == thread_id,
                    mailbox.c.org_id == scope.org_id,
                    mailbox.c.client_message_id == client_message_id,
                )
            )
        ).first()
    if existing is None:
        raise NotFound("thread not found")
    return _item(existing), False


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
    async with db.connect() as conn:
        rows = (await conn.execute(stmt, {"age": older_than, "limit": limit})).all()
    return [(r.org_id, r.thread_id) for r in rows]
