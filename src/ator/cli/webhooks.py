"""`ator webhooks ...`: outbound endpoints, their deliveries and replay, and inbound
endpoints and what they received, on a server over its HTTP API (layer: cli; imports
ator.cli.remote, ator.cli.workflow (the shared options and runner), typer).

    ator webhooks event-types | list | create URL | show ID | update ID | delete ID
    ator webhooks rotate ID | test ID | deliveries ID | delivery ID | replay DELIVERY_ID
    ator webhooks replay-range ENDPOINT_ID --since T --until T
    ator webhooks inbound list | create NAME --mapping JSON | show ID | update ID
    ator webhooks inbound delete ID | received ID | request RECEIVED_ID | replay RECEIVED_ID

Every command takes `--url` (ATOR_URL) and `--key` (ATOR_API_KEY) and prints JSON; a
problem+json answer prints its code and detail and exits 1. A secret (or an inbound token)
is printed once, by the command that made it. The async cores take an `ApiClient`, so tests
drive them against the app in-process.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from ator.cli.remote import ApiClient
from ator.cli.workflow import Key, Url, _run

__all__ = [
    "create_endpoint",
    "create_inbound",
    "deliveries",
    "delivery",
    "inbound_app",
    "received",
    "replay",
    "replay_range",
    "replay_received",
    "update_endpoint",
    "update_inbound",
    "webhooks_app",
]

webhooks_app = typer.Typer(help="Webhooks on an ator server (over its HTTP API).",
                           no_args_is_help=True)
inbound_app = typer.Typer(help="Inbound webhooks: where outside systems send.",
                          no_args_is_help=True)
webhooks_app.add_typer(inbound_app, name="inbound")

Events = Annotated[list[str] | None, typer.Option(
    "--event", help="An event type sent (repeat; none: all). See `event-types`.")]


def _json(name: str, text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise typer.BadParameter(f"{name} is not JSON: {exc}") from exc


# Outbound ---------------------------------------------------------------------------------

async def create_endpoint(api: ApiClient, url: str, events: list[str],
                          description: str) -> dict[str, Any]:
    return await api.post("/v1/webhooks/endpoints", {
        "url": url, "event_types": events, "description": description})


async def update_endpoint(api: ApiClient, endpoint_id: str, **changes: Any) -> dict[str, Any]:
    body = {k: v for k, v in changes.items() if v is not None}
    return await api.patch(f"/v1/webhooks/endpoints/{endpoint_id}", body)


async def deliveries(api: ApiClient, endpoint_id: str, limit: int) -> dict[str, Any]:
    return await api.get(f"/v1/webhooks/endpoints/{endpoint_id}/deliveries",
                         params={"limit": limit})


async def delivery(api: ApiClient, delivery_id: str) -> dict[str, Any]:
    return await api.get(f"/v1/webhooks/deliveries/{delivery_id}")


async def replay(api: ApiClient, delivery_id: str) -> dict[str, Any]:
    return await api.post(f"/v1/webhooks/deliveries/{delivery_id}/replay", {})


async def replay_range(api: ApiClient, endpoint_id: str, since: str, until: str,
                       limit: int) -> dict[str, Any]:
    return await api.post(f"/v1/webhooks/endpoints/{endpoint_id}/replay",
                          {"since": since, "until": until, "limit": limit})


@webhooks_app.command("event-types")
def event_types_cmd(url: Url, key: Key) -> None:
    """The event types an endpoint may filter on."""
    _run(url, key, lambda api: api.get("/v1/webhooks/event-types"))


@webhooks_app.command("list")
def list_cmd(url: Url, key: Key) -> None:
    """The org's outbound endpoints."""
    _run(url, key, lambda api: api.get("/v1/webhooks/endpoints"))


@webhooks_app.command("create")
def create_cmd(target: Annotated[str, typer.Argument(help="The receiver's URL.")], url: Url,
               key: Key, event: Events = None,
               description: Annotated[str, typer.Option()] = "") -> None:
    """Register an endpoint (admin); its secret is printed this once."""
    _run(url, key, lambda api: create_endpoint(api, target, event or [], description))


@webhooks_app.command("show")
def show_cmd(endpoint_id: str, url: Url, key: Key) -> None:
    """One endpoint (why and when it was disabled, if it was)."""
    _run(url, key, lambda api: api.get(f"/v1/webhooks/endpoints/{endpoint_id}"))


@webhooks_app.command("update")
def update_cmd(endpoint_id: str, url: Url, key: Key,
               target: Annotated[str | None, typer.Option("--target",
                                                          help="A new receiver URL.")] = None,
               event: Events = None,
               description: Annotated[str | None, typer.Option()] = None,
               enabled: Annotated[bool | None, typer.Option(
                   "--enable/--disable", help="Enable again, or disable.")] = None) -> None:
    """Change an endpoint (admin)."""
    _run(url, key, lambda api: update_endpoint(api, endpoint_id, url=target,
                                               event_types=event, description=description,
                                               enabled=enabled))


@webhooks_app.command("delete")
def delete_cmd(endpoint_id: str, url: Url, key: Key) -> None:
    """Delete an endpoint and its deliveries (admin)."""
    _run(url, key, lambda api: api.delete(f"/v1/webhooks/endpoints/{endpoint_id}"))


@webhooks_app.command("rotate")
def rotate_cmd(endpoint_id: str, url: Url, key: Key,
               overlap: Annotated[int, typer.Option(
                   help="Seconds the old secret still signs beside the new.")] = 86_400,
               ) -> None:
    """A new secret (printed this once); both sign during the overlap (admin)."""
    _run(url, key, lambda api: api.post(f"/v1/webhooks/endpoints/{endpoint_id}/rotate-secret",
                                        {"overlap_s": overlap}))


@webhooks_app.command("test")
def test_cmd(endpoint_id: str, url: Url, key: Key) -> None:
    """Send a `webhook.test` event to this endpoint (admin)."""
    _run(url, key, lambda api: api.post(f"/v1/webhooks/endpoints/{endpoint_id}/test", {}))


@webhooks_app.command("deliveries")
def deliveries_cmd(endpoint_id: str, url: Url, key: Key,
                   limit: Annotated[int, typer.Option(min=1, max=500)] = 50) -> None:
    """An endpoint's deliveries, newest first."""
    _run(url, key, lambda api: deliveries(api, endpoint_id, limit))


@webhooks_app.command("delivery")
def delivery_cmd(delivery_id: str, url: Url, key: Key) -> None:
    """One delivery and its log of attempts."""
    _run(url, key, lambda api: delivery(api, delivery_id))


@webhooks_app.command("replay")
def replay_cmd(delivery_id: str, url: Url, key: Key) -> None:
    """Send a finished delivery again, same webhook-id (admin)."""
    _run(url, key, lambda api: replay(api, delivery_id))


@webhooks_app.command("replay-range")
def replay_range_cmd(endpoint_id: str, url: Url, key: Key,
                     since: Annotated[str, typer.Option(help="ISO 8601, inclusive.")],
                     until: Annotated[str, typer.Option(help="ISO 8601, exclusive.")],
                     limit: Annotated[int, typer.Option(min=1, max=10_000)] = 1000) -> None:
    """Send the endpoint's failed deliveries made in [since, until) again (admin)."""
    _run(url, key, lambda api: replay_range(api, endpoint_id, since, until, limit))


# Inbound ----------------------------------------------------------------------------------

async def create_inbound(api: ApiClient, name: str, mapping: Any, verification: Any = None,
                         secret: str | None = None,
                         max_bytes: int | None = None) -> dict[str, Any]:
    body = {"name": name, "mapping": mapping, "verification": verification,
            "secret": secret, "max_bytes": max_bytes}
    return await api.post("/v1/webhooks/inbound", {k: v for k, v in body.items()
                                                   if v is not None})


async def update_inbound(api: ApiClient, inbound_id: str, **changes: Any) -> dict[str, Any]:
    return await api.patch(f"/v1/webhooks/inbound/{inbound_id}",
                           {k: v for k, v in changes.items() if v is not None})


async def received(api: ApiClient, inbound_id: str, limit: int) -> dict[str, Any]:
    return await api.get(f"/v1/webhooks/inbound/{inbound_id}/received",
                         params={"limit": limit})


async def replay_received(api: ApiClient, received_id: str) -> dict[str, Any]:
    return await api.post(f"/v1/webhooks/inbound/received/{received_id}/replay", {})


@inbound_app.command("list")
def inbound_list_cmd(url: Url, key: Key) -> None:
    """The org's inbound endpoints."""
    _run(url, key, lambda api: api.get("/v1/webhooks/inbound"))


@inbound_app.command("create")
def inbound_create_cmd(
        name: str, url: Url, key: Key,
        mapping: Annotated[str, typer.Option(help=(
            'JSON: {"to": "thread", "thread_id"|"setup_id", "text", "key"?, "title"?} or '
            '{"to": "workflow", "workflow_id", "input"?, "key"?}; expressions in JSONata.'))],
        verification: Annotated[str | None, typer.Option(help=(
            'JSON: {"method": "standard_webhooks"|"hmac"|"token", ...}.'))] = None,
        secret: Annotated[str | None, typer.Option(
            help="The sender's own secret (hmac, standard_webhooks).")] = None,
        max_bytes: Annotated[int | None, typer.Option(min=1)] = None) -> None:
    """Register an inbound endpoint (admin); its secret or token is printed this once."""
    _run(url, key, lambda api: create_inbound(
        api, name, _json("--mapping", mapping), _json("--verification", verification),
        secret, max_bytes))


@inbound_app.command("show")
def inbound_show_cmd(inbound_id: str, url: Url, key: Key) -> None:
    """One inbound endpoint."""
    _run(url, key, lambda api: api.get(f"/v1/webhooks/inbound/{inbound_id}"))


@inbound_app.command("update")
def inbound_update_cmd(inbound_id: str, url: Url, key: Key,
                       name: Annotated[str | None, typer.Option()] = None,
                       mapping: Annotated[str | None, typer.Option(help="JSON.")] = None,
                       max_bytes: Annotated[int | None, typer.Option(min=1)] = None) -> None:
    """A new name, mapping or size limit (admin); replay failed requests after."""
    _run(url, key, lambda api: update_inbound(api, inbound_id, name=name,
                                              mapping=_json("--mapping", mapping),
                                              max_bytes=max_bytes))


@inbound_app.command("delete")
def inbound_delete_cmd(inbound_id: str, url: Url, key: Key) -> None:
    """Delete an inbound endpoint and what it received (admin)."""
    _run(url, key, lambda api: api.delete(f"/v1/webhooks/inbound/{inbound_id}"))


@inbound_app.command("received")
def inbound_received_cmd(inbound_id: str, url: Url, key: Key,
                         limit: Annotated[int, typer.Option(min=1, max=500)] = 50) -> None:
    """What the endpoint received, newest first: status, error, what it became."""
    _run(url, key, lambda api: received(api, inbound_id, limit))


@inbound_app.command("request")
def inbound_request_cmd(received_id: str, url: Url, key: Key) -> None:
    """One received request, with its headers and body."""
    _run(url, key, lambda api: api.get(f"/v1/webhooks/inbound/received/{received_id}"))


@inbound_app.command("replay")
def inbound_replay_cmd(received_id: str, url: Url, key: Key) -> None:
    """Map a failed request again, after its mapping was fixed (admin)."""
    _run(url, key, lambda api: replay_received(api, received_id))
