"""Outbound webhook endpoints, their deliveries and replay (layer: webhooks; imports jobs, net,
security, store.webhooks, errors).

An endpoint is an org's URL with event-type filters and a `whsec_` secret, returned once at
creation and kept sealed (AES-GCM under the master key). The URL is judged by the egress
guard when it is registered, with the name resolved: https only unless the operator
allowlisted the host, and no private, loopback, link-local or reserved address (422
`webhook_url_refused`). A name that does not resolve yet is accepted: the guard judges every
delivery again, resolving each time.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from urllib.parse import urlsplit
from uuid import UUID

from ator import jsonenc
from ator.errors import ConfigError, Conflict, EgressBlocked, NotFound, ValidationFailed
from ator.jobs import JobQueue
from ator.net import Egress
from ator.security.crypto import MasterKey
from ator.store import webhooks as store
from ator.store.database import Database
from ator.store.scope import Scope
from ator.webhooks.delivery import DELIVER, disabled, secret_context
from ator.webhooks.events import EventTypes
from ator.webhooks.signing import new_secret

__all__ = ["Webhooks"]


class Webhooks:
    """The outbound side, reached as `Ator.service(Webhooks)`."""

    def __init__(self, db: Database, master_key: MasterKey, queue: JobQueue,
                 egress: Egress, event_types: EventTypes) -> None:
        self.event_types = event_types
        self.db = db
        self.master_key = master_key
        self.queue = queue
        self.egress = egress

    async def create_endpoint(self, scope: Scope, *, url: str, event_types: Sequence[str] = (),
                              description: str = "") -> tuple[store.Endpoint, str]:
        """Register an endpoint; returns it and its secret (shown this once). Raises
        ValidationFailed (422) for an unknown event type or a URL the guard refuses."""
        types = self.event_types.check(event_types)
        await self._check_url(url)
        secret = new_secret()
        nonce, ct = self.master_key.encrypt(secret, context=secret_context(scope.org_id))
        endpoint = await store.create_endpoint(
            self.db, scope, url=url, description=description,
            event_types=types, nonce=nonce, ct=ct)
        return endpoint, secret

    async def update_endpoint(self, scope: Scope, endpoint_id: UUID, *, url: str | None = None,
                              event_types: Sequence[str] | None = None,
                              description: str | None = None,
                              enabled: bool | None = None) -> store.Endpoint:
        """Change an endpoint; `enabled` False disables it (the org is told, as for an
        automatic disable), True enables it again with its failure clock cleared. Raises
        NotFound, ValidationFailed as `create_endpoint`."""
        await self.get_endpoint(scope, endpoint_id)
        types = None if event_types is None else self.event_types.check(event_types)
        if url is not None:
            await self._check_url(url)
        if url is not None or types is not None or description is not None:
            await store.update_endpoint(self.db, scope, endpoint_id, url=url,
                                        description=description, event_types=types)
        if enabled is True:
            await store.enable_endpoint(self.db, scope, endpoint_id)
        elif enabled is False:
            async with self.db.begin() as conn:
                done = await store.disable_endpoint(conn, scope, endpoint_id,
                                                    "disabled by an admin")
                if done is not None:
                    await disabled(conn, scope, done)
        return await self.get_endpoint(scope, endpoint_id)

    async def _check_url(self, url: str) -> None:
        try:
            parts = urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            if not parts.hostname:
                raise ValueError("no host")
            self.egress.guard.check_url(url)
            try:
                await self.egress.guard.admit(parts.scheme, parts.hostname, port)
            except OSError:
                # A name that does not resolve today is no danger: every delivery is judged
                # again, and a name may be published after its endpoint is registered. It
                # still needs https unless the operator allowlisted it.
                if parts.scheme != "https" and not self.egress.policy.allows_host(
                        parts.hostname):
                    raise EgressBlocked(parts.hostname, "https required for a destination "
                                        "not in ATOR_EGRESS_ALLOW") from None
        except EgressBlocked as exc:
            raise ValidationFailed(f"this URL may not receive webhooks: {exc.message}",
                                   code="webhook_url_refused") from None
        except (ValueError, ConfigError) as exc:  # malformed
            raise ValidationFailed(f"not an http(s) URL: {exc}",
                                   code="webhook_url_refused") from None

    async def rotate_secret(self, scope: Scope, endpoint_id: UUID, *,
                            overlap: float) -> tuple[store.Endpoint, str]:
        """A new secret (returned this once); the old one still signs, beside it, for
        `overlap` seconds. Raises NotFound."""
        secret = new_secret()
        nonce, ct = self.master_key.encrypt(secret, context=secret_context(scope.org_id))
        rotated = await store.rotate_secret(self.db, scope, endpoint_id, nonce=nonce, ct=ct,
                                            overlap=overlap)
        if rotated is None:
            raise NotFound("no such webhook endpoint")
        return rotated, secret

    async def send_test(self, scope: Scope, endpoint_id: UUID) -> UUID:
        """Queue a `webhook.test` event to this endpoint alone (its filters do not apply);
        returns the delivery's id. Raises NotFound."""
        body = jsonenc.dumps({"type": "webhook.test",
                              "timestamp": datetime.now(UTC).isoformat(),
                              "data": {"endpoint_id": str(endpoint_id)}})
        async with self.db.begin() as conn:
            delivery = await store.insert_test_delivery(conn, scope, endpoint_id,
                                                        uuid.uuid4(), body)
            if delivery is None:
                raise NotFound("no such webhook endpoint")
            await self.queue.enqueue(scope, DELIVER, {"delivery_id": str(delivery)},
                                     within=conn)
        return delivery

    async def list_endpoints(self, scope: Scope) -> list[store.Endpoint]:
        return await store.list_endpoints(self.db, scope)

    async def get_endpoint(self, scope: Scope, endpoint_id: UUID) -> store.Endpoint:
        """Raises NotFound (also for another org's)."""
        found = await store.get_endpoint(self.db, scope, endpoint_id)
        if found is None:
            raise NotFound("no such webhook endpoint")
        return found

    async def delete_endpoint(self, scope: Scope, endpoint_id: UUID) -> None:
        if not await store.delete_endpoint(self.db, scope, endpoint_id):
            raise NotFound("no such webhook endpoint")

    async def deliveries(self, scope: Scope, endpoint_id: UUID, *,
                         limit: int = 100) -> list[store.Delivery]:
        await self.get_endpoint(scope, endpoint_id)
        return await store.list_deliveries(self.db, scope, endpoint_id, limit=limit)

    async def delivery(self, scope: Scope,
                       delivery_id: UUID) -> tuple[store.Delivery, list[store.Attempt]]:
        """A delivery and its attempts. Raises NotFound."""
        found = await store.get_delivery(self.db, scope, delivery_id)
        if found is None:
            raise NotFound("no such webhook delivery")
        return found[0], await store.list_attempts(self.db, scope, delivery_id)

    async def replay_range(self, scope: Scope, endpoint_id: UUID, *, since: datetime,
                           until: datetime, limit: int = 1000) -> int:
        """Send the endpoint's failed deliveries made in [since, until) again (at most
        `limit`, oldest first); returns how many. Raises NotFound."""
        async with self.db.begin() as conn:
            reopened = await store.reopen_range(conn, scope, endpoint_id, since=since,
                                                until=until, limit=limit)
            if reopened is None:
                raise NotFound("no such webhook endpoint")
            for delivery_id in reopened:
                await self.queue.enqueue(scope, DELIVER, {"delivery_id": str(delivery_id)},
                                         within=conn)
        return len(reopened)

    async def replay(self, scope: Scope, delivery_id: UUID) -> None:
        """Send a finished delivery again, with a fresh retry schedule and the same
        `webhook-id`. Raises NotFound, or Conflict while it is still pending."""
        await self.delivery(scope, delivery_id)
        async with self.db.begin() as conn:
            if not await store.reopen_delivery(conn, scope, delivery_id):
                raise Conflict("the delivery is still pending", code="webhook_delivery_pending")
            await self.queue.enqueue(scope, DELIVER, {"delivery_id": str(delivery_id)},
                                     within=conn)
