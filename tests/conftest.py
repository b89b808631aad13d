"""Shared fixtures: a real PostgreSQL (a fresh database per session), Redis, and Ator factories.

Database: with ATOR_DATABASE_URL set (CI sets it to the machine's server), a fresh database
is created on that server for the session and dropped at the end; otherwise an embedded
PostgreSQL is started in a temporary data dir. Redis: ATOR_TEST_REDIS_URL, default
redis://127.0.0.1:6379/15. `pair`: two handles on one coordination backend, for tests that run
against both coordinators.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import redis.asyncio
from sqlalchemy.engine import make_url

from ator import Ator, Scope, Settings
from ator.coord import Coordinator, LocalCoordinator, RedisCoordinator
from ator.engine.access import Access
from ator.engine.root import DEFAULT_EXTENSIONS
from ator.providers.base import Provider
from ator.store.records import Event

# The real agent CLIs run only when asked (`make real-cli` installs them; .ci/run asks).
collect_ignore = [] if os.environ.get("ATOR_TEST_REAL_CLI") == "1" else ["test_real_cli.py"]

REDIS_URL = os.environ.get("ATOR_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")

Pair = tuple[Coordinator, Coordinator]


async def drop_keys(prefix: str) -> None:
    raw = redis.asyncio.Redis.from_url(REDIS_URL)
    try:
        keys = [key async for key in raw.scan_iter(match=prefix + "*")]
        if keys:
            await raw.delete(*keys)
    finally:
        await raw.aclose()


@pytest.fixture(params=["local", pytest.param("redis", marks=pytest.mark.redis)])
async def pair(request: pytest.FixtureRequest) -> AsyncIterator[Pair]:
    """Two handles on one coordination backend: for Redis two RedisCoordinator instances
    (two replicas) sharing a random key prefix, dropped afterwards; for the local one the
    same object twice, since one process has one coordinator."""
    if request.param == "local":
        local = LocalCoordinator()
        yield local, local
        await local.close()
        return
    prefix = f"ator-test:{uuid.uuid4().hex}:"
    first = RedisCoordinator(REDIS_URL, prefix=prefix)
    second = RedisCoordinator(REDIS_URL, prefix=prefix)
    try:
        yield first, second
    finally:
        await first.close()
        await second.close()
        await drop_keys(prefix)


def _plain(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture(scope="session")
async def database_url() -> AsyncIterator[str]:
    server = os.environ.get("ATOR_DATABASE_URL")
    embedded_dir: Path | None = None
    if server is None:
        from ator.store.embedded import start_embedded

        embedded_dir = Path(tempfile.mkdtemp(prefix="ator-test-pg-"))
        server = await asyncio.to_thread(start_embedded, embedded_dir)
    name = f"ator_test_{uuid.uuid4().hex[:10]}"
    admin = _plain(server)
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    yield make_url(admin).set(database=name).render_as_string(hide_password=False)
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
    if embedded_dir is not None:
        from ator.store.embedded import stop_embedded

        await asyncio.to_thread(stop_embedded, embedded_dir)
        shutil.rmtree(embedded_dir, ignore_errors=True)


@pytest.fixture
async def own_database(database_url: str) -> AsyncIterator[str]:
    """A fresh database on the session's server, for this test alone (dropped after)."""
    admin = make_url(database_url).set(drivername="postgresql")
    name = f"ator_own_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(admin.render_as_string(hide_password=False))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    yield admin.set(database=name).render_as_string(hide_password=False)
    conn = await asyncpg.connect(admin.render_as_string(hide_password=False))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture
def settings_factory(database_url: str, tmp_path: Path) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        base: dict[str, Any] = {
            "database_url": database_url,
            "data_dir": tmp_path / "data",
            "lease_ttl": 5.0,
            "reaper_interval": 0.5,
            "owner_id": f"test-{uuid.uuid4().hex[:6]}",
        }
        base.update(overrides)
        return Settings(**base)

    return make


AtorFactory = Callable[..., Any]


# Work an earlier test left in the session's database (its runtime closed): jobs still
# queued or running and enabled schedules. A runtime's worker serves every org's jobs, as
# it should in production, so without this a test's jobs queue behind whatever earlier
# tests left behind (calls to fakes that are gone, waiting out their timeouts), and which
# leftovers a test meets depends on the order the tests ran in.
_LEFTOVERS = (
    "UPDATE jobs SET state = 'dead', finished_at = now(), lease_owner = NULL,"
    " lease_until = NULL, last_error = 'left by an earlier test'"
    " WHERE state IN ('queued', 'running')",
    "UPDATE schedules SET enabled = false WHERE enabled",
)


async def _retire_leftovers(database_url: str) -> None:
    conn = await asyncpg.connect(_plain(database_url))
    try:
        for statement in _LEFTOVERS:
            with contextlib.suppress(asyncpg.UndefinedTableError):  # not migrated yet
                await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture
async def make_ator(settings_factory: Callable[..., Settings],
                    database_url: str) -> AsyncIterator[AtorFactory]:
    """`async with make_ator(providers={...}, **settings) as ator:` — closed at test end.
    What earlier tests left running in the database is retired first (`_LEFTOVERS`)."""
    await _retire_leftovers(database_url)
    opened: list[Ator] = []

    @asynccontextmanager
    async def factory(
        providers: dict[str, Provider] | None = None, tools: Any = None, toolsets: Any = (),
        hooks: Any = (), services: Any = None, engine: bool = True,
        extensions: Any = DEFAULT_EXTENSIONS, **overrides: Any
    ) -> AsyncIterator[Ator]:
        ator = await Ator.open(settings_factory(**overrides), providers=providers, tools=tools,
                               toolsets=toolsets, hooks=hooks, services=services,
                               engine=engine, extensions=extensions)
        opened.append(ator)
        try:
            yield ator
        finally:
            opened.remove(ator)
            await ator.close()

    yield factory
    for ator in opened:
        await ator.close()


async def new_thread(
    ator: Ator, provider: str, *, model: str = "scripted", config: dict[str, Any] | None = None,
    budget: Any = None,
) -> tuple[Scope, Any]:
    org = await ator.create_org(f"org-{uuid.uuid4().hex[:6]}", monthly_budget_usd=budget)
    scope = Scope(org.id)
    setup = await ator.create_setup(scope, name="s", provider=provider, model=model,
                                    config=config)
    thread = await ator.create_thread(scope, setup.id)
    return scope, thread


async def quiet_reaper(ator: Ator) -> None:
    """Stop the runtime's reaper, for a test that counts statements. Its first sweep runs
    as the runtime starts, whatever `reaper_interval` is, and writes twice (lost turns,
    closed reservations): under load it can still be running when the test's window opens
    (CI counted 3 commits where a post is 1). Once this returns it sends nothing more."""
    await ator.reaper.close()


async def wait_for_event(
    ator: Ator, scope: Scope, thread_id: uuid.UUID, predicate: Callable[[Event], bool],
    *, timeout: float = 30.0, after_seq: int = 0,
) -> Event:
    """Follow the thread's events (long-poll, no sleeps) until one matches."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    seq = after_seq
    while (left := deadline - loop.time()) > 0:
        for frame in await ator.wait_events(scope, thread_id, after_seq=seq, timeout=left):
            event = record_of(frame)
            seq = event.seq
            if predicate(event):
                return event
    raise AssertionError("event did not arrive in time")


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Return once `condition()` holds (checked every 10 ms), TimeoutError after `timeout`:
    for state that announces nothing (another task's bookkeeping)."""
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 (there is no event to wait on)
            await asyncio.sleep(0.01)


def record_of(frame: dict[str, Any]) -> Event:
    """The event a frame (engine/wire.py: `{v, seq, type, data}`) carries."""
    record = frame["data"]
    return Event(seq=frame["seq"], kind=frame["type"], data=record["data"],
                 turn_id=uuid.UUID(record["turn_id"]) if record["turn_id"] else None,
                 created_at=datetime.datetime.fromisoformat(record["created_at"]),
                 thread_id=uuid.UUID(record["thread_id"]))


def ended(event: Event) -> bool:
    return event.kind == "turn_ended"


WaitFn = Callable[..., Awaitable[Event]]


@asynccontextmanager
async def operator_client(
    make_ator: Any, **settings: Any
) -> AsyncIterator[tuple[Any, str, Ator]]:
    """An in-process API client with the operator's admin key, on a runtime made with
    `settings`: (client, key, runtime)."""
    import httpx

    from ator.api.app import create_app
    from ator.store import keys as key_store
    from ator.store import orgs as org_store

    async with make_ator(**settings) as runtime:
        app = create_app(runtime.settings, runtime=runtime)
        app.state.ator = runtime
        made = await runtime.service(Access).bootstrap()
        key = made[0] if made is not None else None
        if key is None:  # the session database already has keys: make a fresh operator
            org = await runtime.create_org(f"operator-{uuid.uuid4().hex[:6]}")
            await key_store.mark_operator(runtime.db, org.id)
            user = await org_store.create_user(runtime.db, Scope(org.id), "a@x", "admin")
            _, key = await key_store.create_key(runtime.db, Scope(org.id), user_id=user,
                                                name="k", role="admin")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://ator", timeout=60) as client:
            yield client, key, runtime
