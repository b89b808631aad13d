"""The HTTP application (layer: api; imports fastapi, engine.runtime, api.*).

`create_app(settings)` builds the FastAPI app whose lifespan opens the runtime (database,
coordinator, engine, reaper). All routes are under /v1 except health, metrics and the web
console (/ui, api.console). Besides the core's routers listed here, it mounts those the
engine's extensions contribute (`Extension.routes()`, built on agent.routes, which reach the
API's authentication through `app.state.authenticate`): at once for a given runtime, else as
the lifespan opens one. The body
limit (api.limits.BodyLimit) wraps everything: it runs before routing, parsing and auth.
`X-Forwarded-For` and `X-Forwarded-Proto` are read only from the peers in
ATOR_TRUSTED_PROXIES (uvicorn's proxy-headers middleware, outermost); with none, never.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.routing import Route

import ator
from ator.api import (
    analyses,
    approvals,
    calls,
    catalog,
    instructions,
    keys,
    mcp_servers,
    ops,
    orgs,
    schedules,
    secrets,
    sessions,
    setups,
    sse,
    sso,
    threads,
    tree_caps,
    webhooks,
    workflows,
)
from ator.api.auth import authenticate
from ator.api.console import mount_console
from ator.api.first import RequestsFirst
from ator.api.gateway_calls import router as gateway_calls
from ator.api.limits import BodyLimit, WaitSlots
from ator.api.problems import install_problem_handlers
from ator.api.responses import JsonResponse
from ator.api.tracing import TraceRequests
from ator.engine.access import Access
from ator.engine.runtime import Ator
from ator.gateway import McpGateway
from ator.obs import gctune, tracing
from ator.obs.logging import configure_logging
from ator.providers.base import Provider
from ator.realtime import SocketRoute, SocketServer
from ator.settings import Settings

__all__ = ["CORE_ROUTERS", "announce_bootstrap", "create_app", "worker_app"]

# The core's routers, in the order requests try them. Threads first: a message, a thread's
# read and its events are most of the traffic, and each router ahead of them cost every one
# of those requests a pass over its routes (7 were: ~50 us of CPU per request). No route
# shadows another (tests/test_routes.py), so the order decides nothing but that cost.
CORE_ROUTERS = tuple(module.router for module in (
    threads, ops, orgs, keys, secrets, tree_caps, sessions, setups, sse, mcp_servers,
    instructions, calls, catalog, webhooks, workflows, schedules, approvals, analyses, sso))

def announce_bootstrap(runtime_key: tuple[str, bool] | None) -> None:
    """Print a newly created operator key once, to stderr (a preset one is never printed)."""
    if runtime_key is not None and not runtime_key[1]:
        print(f"\nator: created the operator org and its admin API key (shown once):\n"
              f"  {runtime_key[0]}\n", file=sys.stderr, flush=True)


def create_app(
    settings: Settings | None = None,
    *,
    providers: Mapping[str, Provider] | None = None,
    runtime: Ator | None = None,
) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = runtime is None
        rt = runtime or await Ator.open(settings, providers=providers)
        app.state.ator = rt
        if owned:
            mount_extensions(rt)
        sockets.attach(rt)
        await mcp_gateway.attach(rt)
        try:
            announce_bootstrap(await rt.service(Access).bootstrap())
            if owned:  # a served process, not a test's runtime
                gctune.tune(settings.gc_thresholds)
            if owned and settings.run_jobs:  # ATOR_RUN_JOBS=false: workers run them
                await rt.start_jobs()
            yield
        finally:
            await mcp_gateway.close()
            await sockets.close()
            if owned:
                await rt.close()

    app = FastAPI(
        title="ator",
        version=ator.__version__,
        description="Self-hosted, multi-tenant runtime for LLM agents.",
        lifespan=lifespan,
        default_response_class=JsonResponse,  # one JSON encoder: ator.jsonenc
    )
    app.state.authenticate = authenticate  # for the extensions' routers (agent.routes)
    app.state.wait_slots = WaitSlots(per_user=settings.max_waits_per_user,
                                     per_org=settings.max_waits_per_org)
    # The socket server (ator.realtime) shares the app: /socket.io/ goes to it. With no
    # lifespan (tests), whoever sets app.state.ator attaches and closes app.state.sockets.
    sockets = SocketServer(redis_url=settings.redis_url, prefix=settings.redis_prefix)
    app.state.sockets = sockets
    # Innermost of the middlewares: /socket.io/ never reaches it (SocketRoute), a too-large
    # body is refused before it (BodyLimit).
    app.add_middleware(RequestsFirst)
    app.add_middleware(SocketRoute, server=sockets)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    if tracing.enabled():  # off: not even a middleware frame per request
        app.add_middleware(TraceRequests)
    if settings.trusted_proxies:
        # Outermost, so every route and the socket gateway see the client the operator's
        # proxies name. Only their X-Forwarded-* count; uvicorn's own reading of them is
        # off (cli.server), so no server running this app trusts anyone by default.
        from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

        app.add_middleware(ProxyHeadersMiddleware,
                           trusted_hosts=list(settings.trusted_proxies))
    install_problem_handlers(app)
    for router in CORE_ROUTERS:
        app.include_router(router)

    def mount_extensions(rt: Ator) -> None:
        for router in rt.routes():
            app.include_router(router)

    if runtime is not None:  # a test's runtime: its app may run without a lifespan
        mount_extensions(runtime)
    # The MCP gateway (ator.gateway): an org's tools to outside MCP clients, at /mcp. Its
    # route goes first: the router tries routes in order, and behind the ~130 /v1 routes
    # matching them cost a `tools/call` more CPU than the gateway's own work.
    mcp_gateway = McpGateway(settings)
    app.state.mcp_gateway = mcp_gateway
    app.router.routes.insert(0, Route("/mcp", endpoint=mcp_gateway,
                                      methods=["GET", "POST", "DELETE"]))
    app.include_router(gateway_calls)
    mount_console(app, settings.web_dir)
    return app


def worker_app() -> FastAPI:
    """The app of one `ator serve --workers N` process (a uvicorn factory): settings from the
    environment, logging configured in this process too."""
    settings = Settings()
    configure_logging(json_lines=settings.log_json, level=settings.log_level)
    tracing.configure_from(settings)
    return create_app(settings)
