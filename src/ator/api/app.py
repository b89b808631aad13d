"""The HTTP application (layer: api; imports fastapi, engine.runtime, api.*).

`create_app(settings)` builds the FastAPI app whose lifespan opens the runtime (database,
coordinator, engine, reaper). All routes are under /v1 except health and metrics. The body
limit (api.limits.BodyLimit) wraps everything: it runs before routing, parsing and auth.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from fastapi import FastAPI

import ator
from ator.api import ops, orgs, setups, threads
from ator.api.limits import BodyLimit, WaitSlots
from ator.api.problems import install_problem_handlers
from ator.engine.runtime import Ator
from ator.obs.logging import configure_logging
from ator.providers.base import Provider
from ator.security.keys import hash_key, parse_prefix
from ator.settings import Settings
from ator.store import keys as key_store
from ator.store import orgs as org_store
from ator.store.scope import Scope

__all__ = ["bootstrap_admin_key", "create_app", "worker_app"]

_BOOTSTRAP_LOCK = 0x61746F73  # pg advisory lock key serializing the first start


async def bootstrap_admin_key(runtime: Ator, *, announce: bool = True) -> str | None:
    """On a database with no API key: create the operator org, an admin and a key.

    Replicas starting together on an empty database serialize on an advisory lock, so only
    one creates it. Returns the key (a random one is printed once to stderr when `announce`;
    a preset ATOR_BOOTSTRAP_KEY is never printed), or None if keys exist."""
    async with runtime.db.advisory_lock(_BOOTSTRAP_LOCK):
        if await key_store.any_key_exists(runtime.db):
            return None
        org = await runtime.create_org("operator")
        await key_store.mark_operator(runtime.db, org.id)
        scope = Scope(org.id)
        user_id = await org_store.create_user(runtime.db, scope, "admin@localhost", "admin")
        record, key = await key_store.create_key(runtime.db, scope, user_id=user_id,
                                                 name="bootstrap", role="admin")
        preset = runtime.settings.bootstrap_key
        if preset is not None:
            wanted = preset.get_secret_value()
            if parse_prefix(wanted) is None:
                raise ValueError("ATOR_BOOTSTRAP_KEY must look like ator_<8 hex>_<secret>")
            await key_store.replace_key_hash(runtime.db, record.id, wanted[5:13],
                                             hash_key(wanted))
            return wanted
    if announce:
        print(
            f"\nator: created the operator org and its admin API key (shown once):\n  {key}\n",
            file=sys.stderr, flush=True,
        )
    return key


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
        try:
            await bootstrap_admin_key(rt)
            yield
        finally:
            if owned:
                await rt.close()

    app = FastAPI(
        title="ator",
        version=ator.__version__,
        description="Self-hosted, multi-tenant runtime for LLM agents.",
        lifespan=lifespan,
    )
    app.state.wait_slots = WaitSlots(per_user=settings.max_waits_per_user,
                                     per_org=settings.max_waits_per_org)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    install_problem_handlers(app)
    for module in (ops, orgs, setups, threads):
        app.include_router(module.router)
    return app


def worker_app() -> FastAPI:
    """The app of one `ator serve --workers N` process (a uvicorn factory): settings from the
    environment, logging configured in this process too."""
    settings = Settings()
    configure_logging(json_lines=settings.log_json, level=settings.log_level)
    return create_app(settings)
