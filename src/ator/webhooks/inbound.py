"""Inbound webhooks: receiving endpoints, the raw request kept before the 2xx, and the job
that turns it into a thread message (layer: webhooks; imports agent.extension (Waker), jobs,
security, store.webhooks, store.mailbox, errors, settings).

`receive` verifies the Standard Webhooks signature with the endpoint's secret (401 and
nothing stored when it fails), then in one transaction keeps the request (unique per
endpoint and `webhook-id`: a resend stores nothing and enqueues nothing) and enqueues
`webhooks.inbound`; only then does the route answer 2xx, so a crash after the answer loses
nothing. The job renders the endpoint's mapping (`webhooks.mapping`) and puts the message in
the endpoint's thread's mailbox, idempotent per received request; a payload the mapping
cannot render is kept `failed` with its error and can be replayed after the mapping is fixed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from ator.agent.extension import Waker
from ator.errors import Conflict, NotFound
from ator.jobs import JobContext, JobKind, JobQueue
from ator.security.crypto import MasterKey
from ator.settings import Settings
from ator.store import mailbox as mailbox_store
from ator.store import webhooks as store
from ator.store.database import Database
from ator.store.scope import Scope
from ator.webhooks.delivery import secret_context
from ator.webhooks.mapping import MappingError, check_mapping, render
from ator.webhooks.signing import new_secret, verify

__all__ = ["INBOUND", "InboundHooks", "Received"]

INBOUND = "webhooks.inbound"
_KEPT_HEADERS = ("content-type", "user-agent", "webhook-id", "webhook-timestamp")


class Received:
    """What `receive` did: the stored request's id, or None for a resend."""

    def __init__(self, received_id: UUID | None, webhook_id: str) -> None:
        self.id = received_id
        self.webhook_id = webhook_id

    @property
    def duplicate(self) -> bool:
        return self.id is None


class InboundHooks:
    """The inbound side, reached as `Ator.service(InboundHooks)`."""

    def __init__(self, settings: Settings, db: Database, master_key: MasterKey,
                 queue: JobQueue, waker: Waker) -> None:
        self.settings = settings
        self.db = db
        self.master_key = master_key
        self.queue = queue
        self.waker = waker

    def kinds(self) -> list[JobKind]:
        return [JobKind(INBOUND, self.handle, max_attempts=10, backoff_base=1.0)]

    async def create(self, scope: Scope, *, name: str, thread_id: UUID,
                     mapping: Any) -> tuple[store.Inbound, str]:
        """An endpoint that posts into `thread_id`; returns it and its secret (shown once).
        Raises ValidationFailed for a bad mapping, NotFound for another org's thread."""
        checked = check_mapping(mapping)
        secret = new_secret()
        nonce, ct = self.master_key.encrypt(secret, context=secret_context(scope.org_id))
        made = await store.create_inbound(self.db, scope, name=name, thread_id=thread_id,
                                          mapping=checked, nonce=nonce, ct=ct)
        if made is None:
            raise NotFound("thread not found")
        return made, secret

    async def get(self, scope: Scope, inbound_id: UUID) -> store.Inbound:
        found = await store.get_inbound(self.db, scope, inbound_id)
        if found is None:
            raise NotFound("no such inbound webhook")
        return found

    async def set_mapping(self, scope: Scope, inbound_id: UUID, mapping: Any) -> store.Inbound:
        await self.get(scope, inbound_id)
        await store.set_mapping(self.db, scope, inbound_id, check_mapping(mapping))
        return await self.get(scope, inbound_id)

    async def receive(self, inbound_id: UUID, headers: Mapping[str, str],
                      body: bytes) -> Received:
        """Verify, keep, enqueue (module docstring). Raises NotFound for an unknown endpoint
        and BadSignature (401) when the signature does not verify."""
        endpoint = await store.inbound_by_id(self.db, inbound_id)
        if endpoint is None:
            raise NotFound("no such inbound webhook")
        secret = self.master_key.decrypt(endpoint.secret_nonce, endpoint.secret_ct,
                                         context=secret_context(endpoint.org_id))
        webhook_id = verify(secret, headers, body, now=time.time(),
                            tolerance=self.settings.webhook_tolerance)
        kept = {h: headers[h] for h in _KEPT_HEADERS if h in headers}
        async with self.db.begin() as conn:
            received = await store.store_received(conn, endpoint, webhook_id=webhook_id,
                                                  headers=kept, body=body)
            if received is not None:
                await self.queue.enqueue(Scope(endpoint.org_id), INBOUND,
                                         {"received_id": str(received)}, within=conn)
        return Received(received, webhook_id)

    async def replay(self, scope: Scope, received_id: UUID) -> None:
        """Map a failed request again (after its mapping was fixed). Raises NotFound, or
        Conflict when it did not fail."""
        found = await store.get_received(self.db, scope, received_id)
        if found is None:
            raise NotFound("no such inbound request")
        if found.status != "failed":
            raise Conflict(f"the request is {found.status}, not failed",
                           code="webhook_received_not_failed")
        await self.queue.enqueue(scope, INBOUND, {"received_id": str(received_id)})

    async def handle(self, ctx: JobContext, payload: dict[str, Any]) -> None:
        scope = ctx.scope
        received = await store.get_received(self.db, scope, UUID(payload["received_id"]))
        if received is None or received.status == "delivered":
            return
        endpoint = await store.get_inbound(self.db, scope, received.endpoint_id)
        if endpoint is None:
            return
        try:
            text = render(endpoint.mapping, received.body)
        except MappingError as exc:
            await store.set_received(self.db, scope, received.id, "failed", exc.message)
            return
        # Idempotent per received request: a job run twice puts one item in the mailbox.
        try:
            _, created = await mailbox_store.submit(
                self.db, scope, endpoint.thread_id, client_message_id=f"webhook:{received.id}",
                kind="message", content={"role": "user", "content": [{"type": "text",
                                                                       "text": text}]})
        except NotFound:  # the thread was put in the trash: kept, replayable if restored
            await store.set_received(self.db, scope, received.id, "failed",
                                     "the endpoint's thread is not there")
            return
        await store.set_received(self.db, scope, received.id, "delivered")
        if created:
            await self.waker.notify(scope, endpoint.thread_id)
