"""Webhook routes (layer: api; imports fastapi, engine.runtime, webhooks (services), api.*).

Outbound endpoints, their deliveries and replay under `/v1/webhooks` (admins manage them,
viewers read; another org's is a 404; a secret is in the creation's or rotation's answer
only), the event types, inbound endpoints and what they received under
`/v1/webhooks/inbound`, and `POST /v1/hooks/{id}` (or `/v1/hooks/{id}/{token}`), where
outside systems send: no API key (the endpoint's verification authenticates the sender),
the body capped at `webhook_inbound_max_bytes` while it is read and at the endpoint's own
limit (413), answered 202 once the request is stored.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request, Response

from ator.api.auth import get_ator, require
from ator.api.schemas import (
    WebhookEndpointIn,
    WebhookEndpointPatch,
    WebhookInboundIn,
    WebhookInboundPatch,
    WebhookReplayIn,
    WebhookRotateIn,
)
from ator.engine.runtime import Ator
from ator.errors import AtorError
from ator.store.records import Principal
from ator.webhooks import (
    Attempt,
    Delivery,
    Endpoint,
    EventTypes,
    Inbound,
    InboundHooks,
    Received,
    Webhooks,
)

router = APIRouter()


def endpoint_view(e: Endpoint) -> dict[str, Any]:
    return {"id": str(e.id), "url": e.url, "description": e.description,
            "event_types": e.event_types, "enabled": e.enabled,
            "disabled_reason": e.disabled_reason, "created_at": e.created_at.isoformat(),
            "previous_secret_until": e.previous_until.isoformat() if e.previous_until else None,
            "failing_since": e.failing_since.isoformat() if e.failing_since else None,
            "disabled_at": e.disabled_at.isoformat() if e.disabled_at else None}


def delivery_view(d: Delivery) -> dict[str, Any]:
    return {"id": str(d.id), "endpoint_id": str(d.endpoint_id),
            "webhook_id": f"msg_{d.event_id.hex}", "event_type": d.event_type,
            "status": d.status, "attempts": d.attempts, "last_status": d.last_status,
            "created_at": d.created_at.isoformat(),
            "finished_at": d.finished_at.isoformat() if d.finished_at else None}


def attempt_view(a: Attempt) -> dict[str, Any]:
    return {"attempt": a.attempt, "status": a.status_code, "latency_ms": a.latency_ms,
            "error": a.error, "response_excerpt": a.response_excerpt,
            "at": a.created_at.isoformat()}


def inbound_view(i: Inbound) -> dict[str, Any]:
    token = i.verification["method"] == "token"
    return {"id": str(i.id), "name": i.name, "mapping": i.mapping,
            "verification": i.verification, "max_bytes": i.max_bytes,
            "url": f"/v1/hooks/{i.id}" + ("/{token}" if token else ""),
            "created_at": i.created_at.isoformat()}


_BODY_SHOWN = 65_536


def received_view(r: Received, *, whole: bool = False) -> dict[str, Any]:
    view = {"id": str(r.id), "endpoint_id": str(r.endpoint_id), "webhook_id": r.webhook_id,
            "status": r.status, "error": r.error, "result": r.result, "size": len(r.body),
            "created_at": r.created_at.isoformat()}
    if whole:
        view["headers"] = r.headers
        view["body"] = r.body[:_BODY_SHOWN].decode("utf-8", "replace")
        view["body_truncated"] = len(r.body) > _BODY_SHOWN
    return view


@router.post("/v1/webhooks/endpoints", status_code=201)
async def create_endpoint(body: WebhookEndpointIn, p: Principal = Depends(require("admin")),
                          ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    endpoint, secret = await ator.service(Webhooks).create_endpoint(
        p.scope, url=body.url, event_types=body.event_types, description=body.description)
    return {**endpoint_view(endpoint), "secret": secret}


@router.get("/v1/webhooks/event-types")
async def event_types(p: Principal = Depends(require("viewer")),
                      ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return {"data": [{"name": t.name, "description": t.description}
                     for t in ator.service(EventTypes)]}


@router.patch("/v1/webhooks/endpoints/{endpoint_id}")
async def update_endpoint(endpoint_id: UUID, body: WebhookEndpointPatch,
                          p: Principal = Depends(require("admin")),
                          ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return endpoint_view(await ator.service(Webhooks).update_endpoint(
        p.scope, endpoint_id, url=body.url, event_types=body.event_types,
        description=body.description, enabled=body.enabled))


@router.get("/v1/webhooks/endpoints")
async def list_endpoints(p: Principal = Depends(require("viewer")),
                         ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return {"data": [endpoint_view(e)
                     for e in await ator.service(Webhooks).list_endpoints(p.scope)]}


@router.get("/v1/webhooks/endpoints/{endpoint_id}")
async def get_endpoint(endpoint_id: UUID, p: Principal = Depends(require("viewer")),
                       ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return endpoint_view(await ator.service(Webhooks).get_endpoint(p.scope, endpoint_id))


@router.delete("/v1/webhooks/endpoints/{endpoint_id}", status_code=204)
async def delete_endpoint(endpoint_id: UUID, p: Principal = Depends(require("admin")),
                          ator: Ator = Depends(get_ator)) -> Response:
    await ator.service(Webhooks).delete_endpoint(p.scope, endpoint_id)
    return Response(status_code=204)


@router.post("/v1/webhooks/endpoints/{endpoint_id}/rotate-secret")
async def rotate_secret(endpoint_id: UUID, body: WebhookRotateIn,
                        p: Principal = Depends(require("admin")),
                        ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    endpoint, secret = await ator.service(Webhooks).rotate_secret(
        p.scope, endpoint_id, overlap=body.overlap_s)
    return {**endpoint_view(endpoint), "secret": secret}


@router.post("/v1/webhooks/endpoints/{endpoint_id}/test", status_code=202)
async def send_test(endpoint_id: UUID, p: Principal = Depends(require("admin")),
                    ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return {"delivery_id": str(await ator.service(Webhooks).send_test(p.scope, endpoint_id))}


@router.post("/v1/webhooks/endpoints/{endpoint_id}/replay", status_code=202)
async def replay_range(endpoint_id: UUID, body: WebhookReplayIn,
                       p: Principal = Depends(require("admin")),
                       ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    count = await ator.service(Webhooks).replay_range(
        p.scope, endpoint_id, since=body.since, until=body.until, limit=body.limit)
    return {"replayed": count}


@router.get("/v1/webhooks/endpoints/{endpoint_id}/deliveries")
async def list_deliveries(endpoint_id: UUID, limit: int = Query(100, ge=1, le=500),
                          p: Principal = Depends(require("viewer")),
                          ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    found = await ator.service(Webhooks).deliveries(p.scope, endpoint_id, limit=limit)
    return {"data": [delivery_view(d) for d in found]}


@router.get("/v1/webhooks/deliveries/{delivery_id}")
async def get_delivery(delivery_id: UUID, p: Principal = Depends(require("viewer")),
                       ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    delivery, attempts = await ator.service(Webhooks).delivery(p.scope, delivery_id)
    return {**delivery_view(delivery), "log": [attempt_view(a) for a in attempts]}


@router.post("/v1/webhooks/deliveries/{delivery_id}/replay", status_code=202)
async def replay_delivery(delivery_id: UUID, p: Principal = Depends(require("admin")),
                          ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    await ator.service(Webhooks).replay(p.scope, delivery_id)
    return {"id": str(delivery_id), "status": "pending"}


@router.post("/v1/webhooks/inbound", status_code=201)
async def create_inbound(body: WebhookInboundIn, p: Principal = Depends(require("admin")),
                         ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    made, secret = await ator.service(InboundHooks).create(
        p.scope, name=body.name, mapping=body.mapping, verification=body.verification,
        secret=body.secret, max_bytes=body.max_bytes)
    view = inbound_view(made)
    if made.verification["method"] == "token":  # the token is the secret: shown this once
        return {**view, "url": f"/v1/hooks/{made.id}/{secret}", "token": secret}
    return {**view, "secret": secret}


@router.get("/v1/webhooks/inbound")
async def list_inbound(p: Principal = Depends(require("viewer")),
                       ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return {"data": [inbound_view(i) for i in await ator.service(InboundHooks).endpoints(p.scope)]}


@router.get("/v1/webhooks/inbound/{inbound_id}")
async def get_inbound(inbound_id: UUID, p: Principal = Depends(require("viewer")),
                      ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return inbound_view(await ator.service(InboundHooks).get(p.scope, inbound_id))


@router.patch("/v1/webhooks/inbound/{inbound_id}")
async def update_inbound(inbound_id: UUID, body: WebhookInboundPatch,
                         p: Principal = Depends(require("admin")),
                         ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return inbound_view(await ator.service(InboundHooks).update(
        p.scope, inbound_id, name=body.name, mapping=body.mapping, max_bytes=body.max_bytes,
        set_max="max_bytes" in body.model_fields_set))


@router.delete("/v1/webhooks/inbound/{inbound_id}", status_code=204)
async def delete_inbound(inbound_id: UUID, p: Principal = Depends(require("admin")),
                         ator: Ator = Depends(get_ator)) -> Response:
    await ator.service(InboundHooks).delete(p.scope, inbound_id)
    return Response(status_code=204)


@router.get("/v1/webhooks/inbound/{inbound_id}/received")
async def list_received(inbound_id: UUID, limit: int = Query(100, ge=1, le=500),
                        p: Principal = Depends(require("viewer")),
                        ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    found = await ator.service(InboundHooks).received(p.scope, inbound_id, limit=limit)
    return {"data": [received_view(r) for r in found]}


@router.get("/v1/webhooks/inbound/received/{received_id}")
async def get_received(received_id: UUID, p: Principal = Depends(require("viewer")),
                       ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return received_view(await ator.service(InboundHooks).get_received(p.scope, received_id),
                         whole=True)


@router.post("/v1/webhooks/inbound/received/{received_id}/replay", status_code=202)
async def replay_received(received_id: UUID, p: Principal = Depends(require("admin")),
                          ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    await ator.service(InboundHooks).replay(p.scope, received_id)
    return {"id": str(received_id), "status": "received"}


async def _receive(ator: Ator, inbound_id: UUID, request: Request,
                   token: str | None) -> dict[str, Any]:
    limit = ator.settings.webhook_inbound_max_bytes
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise AtorError(f"a webhook body is at most {limit} bytes",
                            kind="validation", code="payload_too_large", status=413)
    received = await ator.service(InboundHooks).receive(
        inbound_id, {k.lower(): v for k, v in request.headers.items()}, bytes(body),
        token=token)
    return {"webhook_id": received.webhook_id, "duplicate": received.duplicate,
            "id": str(received.id) if received.id else None}


@router.post("/v1/hooks/{inbound_id}", status_code=202)
async def receive(inbound_id: UUID, request: Request,
                  ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return await _receive(ator, inbound_id, request, None)


@router.post("/v1/hooks/{inbound_id}/{token}", status_code=202)
async def receive_with_token(inbound_id: UUID, token: str, request: Request,
                             ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return await _receive(ator, inbound_id, request, token[:200])
