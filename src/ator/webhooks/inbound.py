"""Inbound webhooks: receiving endpoints, the raw request kept before the 2xx, and the job
that maps it to a thread message or a workflow run (layer: webhooks; imports jobs,
security, store.webhook_inbound, workflows.expressions, webhooks.*, errors, settings).

`receive` checks the body against the endpoint's size limit (413) and verifies it by the
endpoint's method (`verification.py`: Standard Webhooks, a provider HMAC header, or a token
in the path; 401 and nothing stored when it fails), then in one transaction keeps the
request (unique per endpoint and webhook id: a resend stores nothing and enqueues nothing)
and enqueues `webhooks.inbound`; only then does the route answer 2xx, so a crash after the
answer loses nothing, and a request accepted while no worker runs waits for one. The job
evaluates the endpoint's mapping (`mapping.py`) and hands the values to its target
(`targets.py`); a payload that fails is kept `failed` with its error and can be replayed
after the mapping is fixed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from ator.errors import AtorError, Conflict, NotFound, ValidationFailed
from ator.jobs import JobContext, JobKind, JobQueue
from ator.security.crypto import MasterKey
from ator.settings import Settings
from ator.store import webhook_inbound as store
from ator.store.database import Database
from ator.store.scope import Scope
from ator.webhooks.delivery import secret_context
from ator.webhooks.mapping import MappingError, apply, check_mapping
from ator.webhooks.targets import Targets
from ator.webhooks.verification import check_verification, new_inbound_secret, verify_request
from ator.workflows.expressions import Expressions

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


class PayloadTooLarge(AtorError):
    kind = "validation"
    code = "payload_too_large"
    status = 413


class InboundHooks:
    """The inbound side, reached as `Ator.service(InboundHooks)`."""

    def __init__(self, settings: Settings, db: Database, master_key: MasterKey,
                 queue: JobQueue, expressions: Expressions, targets: Targets) -> None:
        self.settings = settings
        self.db = db
        self.master_key = master_key
        self.queue = queue
        self.expressions = expressions
        self.targets = targets

    def kinds(self) -> list[JobKind]:
        return [JobKind(INBOUND, self.handle, max_attempts=10, backoff_base=1.0)]

    def _max_bytes(self, given: int | None) -> int | None:
        if given is not None and not 1 <= given <= self.settings.webhook_inbound_max_bytes:
            raise ValidationFailed(
                f"max_bytes is 1 to {self.settings.webhook_inbound_max_bytes} (the operator's "
                "ceiling)", code="webhook_max_bytes_invalid")
        return given

    async def create(self, scope: Scope, *, name: str, mapping: Any,
                     verification: Any = None, secret: str | None = None,
                     max_bytes: int | None = None) -> tuple[store.Inbound, str]:
        """An endpoint; returns it and its secret or token (shown this once). Raises
        ValidationFailed for a bad mapping, verification or size, NotFound for a thread,
        setup or workflow that is not this org's."""
        checked = check_mapping(mapping)
        method = check_verification(verification)
        limit = self._max_bytes(max_bytes)
        thread_id = await self.targets.check(scope, checked)
        made_secret = new_inbound_secret(method, secret)
        nonce, ct = self.master_key.encrypt(made_secret, context=secret_context(scope.org_id))
        made = await store.create_inbound(self.db, scope, name=name, thread_id=thread_id,
                                          mapping=checked, verification=method,
                                          max_bytes=limit, nonce=nonce, ct=ct)
        if made is None:
            raise NotFound("thread not found")
        return made, made_secret

    async def get(self, scope: Scope, inbound_id: UUID) -> store.Inbound:
        found = await store.get_inbound(self.db, scope, inbound_id)
        if found is None:
            raise NotFound("no such inbound webhook")
        return found

    async def endpoints(self, scope: Scope) -> list[store.Inbound]:
        return await store.list_inbound(self.db, scope)

    async def delete(self, scope: Scope, inbound_id: UUID) -> None:
        if not await store.delete_inbound(self.db, scope, inbound_id):
            raise NotFound("no such inbound webhook")

    async def update(self, scope: Scope, inbound_id: UUID, *, name: str | None = None,
                     mapping: Any = None, max_bytes: int | None = None,
                     set_max: bool = False) -> store.Inbound:
        """A new name, mapping (replay failed requests after) or size limit. Raises
        NotFound, ValidationFailed."""
        await self.get(scope, inbound_id)
        checked = None if mapping is None else check_mapping(mapping)
        thread_id = None if checked is None else await self.targets.check(scope, checked)
        updated = await store.update_inbound(
            self.db, scope, inbound_id, name=name, mapping=checked, thread_id=thread_id,
            set_max=set_max, max_bytes=self._max_bytes(max_bytes) if set_max else None)
        if updated is None:
            raise NotFound("no such inbound webhook")
        return updated

    async def set_mapping(self, scope: Scope, inbound_id: UUID, mapping: Any) -> store.Inbound:
        return await self.update(scope, inbound_id, mapping=mapping)

    async def received(self, scope: Scope, inbound_id: UUID, *,
                       limit: int = 100) -> list[store.Received]:
        """The endpoint's received requests, newest first. Raises NotFound."""
        await self.get(scope, inbound_id)
        return await store.list_received(self.db, scope, inbound_id, limit=limit)

    async def get_received(self, scope: Scope, received_id: UUID) -> store.Received:
        found = await store.get_received(self.db, scope, received_id)
        if found is None:
            raise NotFound("no such inbound request")
        return found

    async def receive(self, inbound_id: UUID, headers: Mapping[str, str], body: bytes, *,
                      token: str | None = None) -> Received:
        """Verify, keep, enqueue (module docstring); `headers` lower-cased, `token` the
        path's. Raises NotFound for an unknown endpoint, PayloadTooLarge (413) above its
        limit and BadSignature (401) when the request does not verify."""
        endpoint = await store.inbound_by_id(self.db, inbound_id)
        if endpoint is None:
            raise NotFound("no such inbound webhook")
        if endpoint.max_bytes is not None and len(body) > endpoint.max_bytes:
            raise PayloadTooLarge(f"this endpoint takes at most {endpoint.max_bytes} bytes")
        secret = self.master_key.decrypt(endpoint.secret_nonce, endpoint.secret_ct,
                                         context=secret_context(endpoint.org_id))
        webhook_id = verify_request(endpoint.verification, secret, headers, body, token=token,
                                    now=time.time(), tolerance=self.settings.webhook_tolerance)
        kept_names = {*_KEPT_HEADERS, endpoint.verification.get("id_header")}
        kept = {h: v[:500] for h, v in headers.items() if h in kept_names}
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
        found = await self.get_received(scope, received_id)
        if found.status != "failed":
            raise Conflict(f"the request is {found.status}; only a failed one is replayed",
                           code="webhook_received_not_failed")
        await store.set_received(self.db, scope, received_id, "received")
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
            mapped = await apply(self.expressions, endpoint.mapping, received.body)
            result = await self.targets.deliver(scope, endpoint, received.id, mapped)
        except MappingError as exc:
            await store.set_received(self.db, scope, received.id, "failed", exc.message)
            return
        await store.set_received(self.db, scope, received.id, "delivered", result=result)
