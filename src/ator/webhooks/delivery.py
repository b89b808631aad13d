"""Outbound delivery: the outbox's fan-out and each delivery's attempts (layer: webhooks;
imports jobs, net, security, store.webhooks, errors, settings).

Two job kinds:

- `webhooks.dispatch` (written by the turn's final statement, `store.webhooks.
  TurnEndedOutbox`): one delivery per enabled endpoint that wants the event, each with its
  `webhooks.deliver` job, in one transaction with the job's completion (exactly once).
- `webhooks.deliver`: one POST per attempt, as Standard Webhooks 1.0 (`webhook-id` is the
  event's, the same on every attempt and endpoint; a fresh `webhook-timestamp` and
  signature per attempt), through the egress guard with redirects refused (a 3xx is a failed
  attempt; its target receives nothing). 2xx delivers; 410 disables the endpoint; anything
  else is retried after the next of `webhook_retry_delays` (±10 % jitter; a longer
  `Retry-After` wins) until they are spent, then the delivery is `failed` (replayable).
  During a secret rotation's overlap each request carries two signatures (new, then old).
  An endpoint whose every attempt failed for `webhook_disable_after` seconds is disabled.
  Every attempt is logged: status, latency, error, a capped excerpt of the answer.

Disabling an endpoint (410, failing too long, an admin) writes an `endpoint.disabled` event
for the org's other endpoints in the same transaction (`disable`), and the console shows the
reason and the time.
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import httpx

from ator.errors import EgressBlocked
from ator.jobs import JobContext, JobKind, JobQueue, Retry
from ator.net import Egress
from ator.security.crypto import MasterKey
from ator.settings import Settings
from ator.store import webhook_outbox as outbox
from ator.store import webhooks as store
from ator.store.database import Connection, Database
from ator.store.scope import Scope
from ator.store.webhook_outbox import DISPATCH, DISPATCH_ATTEMPTS
from ator.webhooks.signing import sign

__all__ = ["DELIVER", "DISPATCH", "Deliverer", "disabled", "secret_context"]

DELIVER = "webhooks.deliver"
_MAX_RETRY_AFTER = 86_400.0


def secret_context(org_id: UUID) -> str:
    """The AES-GCM context a webhook secret of this org is sealed under."""
    return f"webhook-secret:{org_id}"


async def disabled(conn: Connection, scope: Scope, endpoint: store.Endpoint) -> None:
    """Tell the org (its other endpoints) that `endpoint` was just disabled."""
    await outbox.emit(conn, scope.org_id, "endpoint.disabled", {
        "org_id": str(scope.org_id), "endpoint_id": str(endpoint.id), "url": endpoint.url,
        "reason": endpoint.disabled_reason,
        "disabled_at": endpoint.disabled_at.isoformat() if endpoint.disabled_at else None})


def retry_after(value: str | None, now: float) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


@dataclass(frozen=True, slots=True)
class Sent:
    """One attempt's outcome: its status (None: no answer), latency, error, the capped
    excerpt of the answer and the receiver's `Retry-After` in seconds."""

    status_code: int | None
    latency_ms: int
    error: str | None
    excerpt: str | None
    wait: float | None


class Deliverer:
    """The two outbound job kinds' handlers, sharing one guarded client."""

    def __init__(self, settings: Settings, db: Database, master_key: MasterKey,
                 queue: JobQueue, egress: Egress) -> None:
        self.settings = settings
        self.db = db
        self.master_key = master_key
        self.queue = queue
        self.delays = settings.webhook_retry_delays
        # Redirects are failures, never followed: the guard refuses the first hop.
        guarded = Egress(replace(egress.policy, max_redirects=0), egress.guard.resolver)
        self.client = guarded.httpx_client(timeout=settings.webhook_timeout)
        self.rng = random.Random()

    def kinds(self) -> list[JobKind]:
        return [
            JobKind(DISPATCH, self.dispatch, max_attempts=DISPATCH_ATTEMPTS, backoff_base=1.0),
            JobKind(DELIVER, self.deliver, max_attempts=len(self.delays) + 1,
                    timeout=self.settings.webhook_timeout + 10.0),
        ]

    async def dispatch(self, ctx: JobContext, payload: dict[str, Any]) -> None:
        async with self.db.begin() as conn:
            for delivery_id in await store.fan_out(conn, ctx.scope, UUID(payload["event_id"])):
                await self.queue.enqueue(ctx.scope, DELIVER, {"delivery_id": str(delivery_id)},
                                         within=conn)
            await ctx.complete(conn)

    async def deliver(self, ctx: JobContext, payload: dict[str, Any]) -> None:
        # One read before the POST and one transaction after it: the attempt's log, the
        # endpoint's health (and a disable, told to the org) and, when the delivery is
        # finished, its status and the job's completion commit together.
        scope = ctx.scope
        found = await store.get_delivery(self.db, scope, UUID(payload["delivery_id"]),
                                         with_endpoint=True)
        if found is None or found[0].status != "pending":
            return
        delivery, body, endpoint = found
        if endpoint is None or not endpoint.enabled:
            async with self.db.begin() as conn:
                await store.finish_delivery(conn, scope, delivery.id, "skipped")
                await ctx.complete(conn)
            return
        attempt = await self._attempt(delivery, endpoint.url, self._secrets(endpoint), body)
        status, wait = attempt.status_code, attempt.wait
        ok = status is not None and 200 <= status < 300
        async with self.db.begin() as conn:
            # The endpoint's row first, then the delivery's: the order a delete of the
            # endpoint takes them in (its cascade), or the two can deadlock.
            health, now_disabled = await store.mark_health(
                conn, scope, endpoint.id, ok=ok, disable_after=self.settings.webhook_disable_after)
            await store.record_attempt(conn, scope, delivery.id, status_code=status,
                                       latency_ms=attempt.latency_ms, error=attempt.error,
                                       excerpt=attempt.excerpt)
            if health is not None and health.enabled and status == 410:
                health = await store.disable_endpoint(conn, scope, endpoint.id,
                                                      "the receiver answered 410 Gone")
                now_disabled = health is not None
            if health is not None and now_disabled:
                await disabled(conn, scope, health)
            enabled = health is not None and health.enabled
            # Failed for good: disabled (410, or failing for too long: `disabled_reason`
            # says which), or the attempts are spent.
            spent = not enabled or ctx.attempt >= min(ctx.max_attempts, len(self.delays) + 1)
            if ok or spent:
                await store.finish_delivery(conn, scope, delivery.id,
                                            "delivered" if ok else "failed")
                await ctx.complete(conn)
                return
        delay = self.delays[ctx.attempt - 1] * self.rng.uniform(0.9, 1.1)
        raise Retry(after=max(delay, min(wait or 0.0, _MAX_RETRY_AFTER)),
                    reason=f"webhook attempt {ctx.attempt} failed ({status})")

    def _secrets(self, endpoint: store.Endpoint) -> list[str]:
        """The endpoint's secret, and during a rotation's overlap the previous one too."""
        context = secret_context(endpoint.org_id)
        found = [self.master_key.decrypt(endpoint.secret_nonce, endpoint.secret_ct,
                                         context=context)]
        if endpoint.previous_nonce is not None and endpoint.previous_ct is not None \
                and endpoint.previous_until is not None \
                and endpoint.previous_until > datetime.now(UTC):
            found.append(self.master_key.decrypt(endpoint.previous_nonce, endpoint.previous_ct,
                                                 context=context))
        return found

    async def _attempt(self, delivery: store.Delivery, url: str, secrets: list[str],
                       body: str) -> Sent:
        """One POST; what to log of it (the caller writes it)."""
        data = body.encode()
        msg_id = f"msg_{delivery.event_id.hex}"
        stamp = int(datetime.now(UTC).timestamp())
        headers = {"content-type": "application/json", "user-agent": "ator-webhooks/1",
                   "webhook-id": msg_id, "webhook-timestamp": str(stamp),
                   "webhook-signature": " ".join(sign(secret, msg_id, stamp, data)
                                                 for secret in secrets)}
        status: int | None = None
        error: str | None = None
        excerpt: str | None = None
        wait: float | None = None
        started = time.monotonic()
        try:
            async with self.client.stream("POST", url, content=data, headers=headers) as answer:
                status = answer.status_code
                wait = retry_after(answer.headers.get("retry-after"), time.time())
                excerpt = await self._excerpt(answer)
        except EgressBlocked as exc:
            error = f"refused by the egress guard: {exc.message}"
            if "redirect" in exc.message:
                error = "the receiver redirected; redirects are not followed"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
        return Sent(status, int((time.monotonic() - started) * 1000), error, excerpt, wait)

    async def _excerpt(self, answer: httpx.Response) -> str:
        limit = self.settings.webhook_response_excerpt
        kept = bytearray()
        async for chunk in answer.aiter_bytes():
            kept += chunk
            if len(kept) >= limit:
                break
        return bytes(kept[:limit]).decode("utf-8", "replace")

    async def aclose(self) -> None:
        await self.client.aclose()
