"""Fixtures for end-to-end tests: real `ator serve` processes on real PostgreSQL and Redis.

Each test module gets a fresh database on the server of the session's `database_url`, so the
first replica to start finds no API key and bootstraps the operator org with a preset
ATOR_BOOTSTRAP_KEY the test knows. Replicas are tracked by their `Deployment`; every
replica's stderr goes to a file that is attached to the report of any test that fails, and
every process is stopped (SIGTERM, then SIGKILL) in teardown.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from tests.conftest import REDIS_URL
from tests.e2e.client import Client
from tests.e2e.replica import Replica, bootstrap_key, master_key

_DEPLOYMENTS: list[Deployment] = []


class Deployment:
    """Replicas sharing one database (and, when `redis` is set, one Redis) and one master
    key: what an operator runs behind a load balancer."""

    def __init__(self, database_url: str, log_dir: Path, *, admin_key: str, master: str,
                 redis: bool, clean_logs: bool = True, **env: Any) -> None:
        self.admin_key = admin_key
        self.clean_logs = clean_logs  # no replica may log a traceback (checked at teardown)
        self.log_dir = log_dir
        self.env = {
            "ATOR_DATABASE_URL": database_url,
            "ATOR_DATA_DIR": str(log_dir / "data"),
            "ATOR_MASTER_KEY": master,
            "ATOR_BOOTSTRAP_KEY": admin_key,
            "ATOR_DB_POOL_SIZE": "8",  # several replicas share one test server
            **({"ATOR_REDIS_URL": REDIS_URL} if redis else {}),
            # Own namespace: other deployments on this Redis (CI jobs, people) never share
            # the reaper's leadership lease or the abort channel with this one.
            "ATOR_REDIS_PREFIX": f"ator-e2e-{admin_key[5:13]}:",
            **{k: str(v) for k, v in env.items()},
        }
        self.replicas: list[Replica] = []
        self.clients: list[Client] = []

    def start(self, name: str, **env: Any) -> Replica:
        """Start one replica and wait for readiness."""
        replica = Replica.start(name, self.log_dir, {**self.env, **{k: str(v) for k, v in
                                                                   env.items()}})
        self.replicas.append(replica)
        return replica

    def restart(self, replica: Replica) -> Replica:
        """Stop `replica` (SIGTERM) and start it again on the same port, as a deploy would
        (clients that reconnect to the same address find the new process)."""
        replica.stop()
        # same owner id (from its env), a new log file
        again = Replica.start(f"{replica.name}-again", self.log_dir, replica.env,
                              port=replica.port)
        self.replicas.append(again)
        return again

    def launch(self, name: str) -> Replica:
        """Start one replica without waiting (see Replica.wait_ready)."""
        replica = Replica.launch(name, self.log_dir, self.env)
        self.replicas.append(replica)
        return replica

    def client(self, replica: Replica, key: str | None = None) -> Client:
        """A client on `replica` with `key` (default: the operator's admin key)."""
        client = Client(replica.url, key or self.admin_key)
        self.clients.append(client)
        return client

    async def aclose(self) -> None:
        """Close the clients and stop every replica (idempotent). Logs stay readable."""
        clients, self.clients = self.clients, []
        for client in clients:
            await client.aclose()
        for replica in self.replicas:
            replica.stop()

    async def __aenter__(self) -> Deployment:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def logs(self) -> list[tuple[str, str]]:
        return [(f"ator serve {r.name} (port {r.port}) stderr", r.log())
                for r in self.replicas]

    def tracebacks(self) -> list[str]:
        """Replicas whose log holds a traceback: an error no HTTP answer showed."""
        if not self.clean_logs:
            return []
        return [f"{r.name}:\n{r.log()}" for r in self.replicas if "Traceback" in r.log()]


DatabaseFactory = Callable[[], Awaitable[str]]


@pytest.fixture(scope="module")
async def databases(database_url: str) -> AsyncIterator[DatabaseFactory]:
    """`await databases()` -> the URL of a fresh, empty database on the session database's
    server; every one made is dropped at the end of the module."""
    # Connected to the session's database, CREATE DATABASE works on any server and user.
    admin = make_url(database_url).set(drivername="postgresql")
    admin_dsn = admin.render_as_string(hide_password=False)
    made: list[str] = []

    async def factory() -> str:
        name = f"ator_e2e_{uuid.uuid4().hex[:10]}"
        conn = await asyncpg.connect(admin_dsn)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        made.append(name)
        return admin.set(database=name).render_as_string(hide_password=False)

    yield factory
    conn = await asyncpg.connect(admin_dsn)
    try:
        for name in made:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture(scope="module")
async def e2e_database_url(databases: DatabaseFactory) -> str:
    """This module's database: empty until the module's first replica starts."""
    return await databases()


DeploymentFactory = Callable[..., Deployment]


@pytest.fixture(scope="module")
async def deployments(
    e2e_database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[DeploymentFactory]:
    """`deployments(redis=True, ATOR_LEASE_TTL=2)` -> a Deployment on this module's database
    (or `database_url`), stopped at the end of the module. Deployments on one database share
    its bootstrap admin key and master key, as an operator's replicas would. At the end, a
    traceback in any replica's log fails the module (unless `clean_logs=False`)."""
    made: list[Deployment] = []
    keys: dict[str, tuple[str, str]] = {}

    def factory(*, redis: bool = False, database_url: str | None = None,
                clean_logs: bool = True, **env: Any) -> Deployment:
        url = database_url or e2e_database_url
        admin_key, master = keys.setdefault(url, (bootstrap_key(), master_key()))
        log_dir = tmp_path_factory.mktemp("ator-e2e")
        deployment = Deployment(url, log_dir, admin_key=admin_key, master=master, redis=redis,
                                clean_logs=clean_logs, **env)
        made.append(deployment)
        _DEPLOYMENTS.append(deployment)
        return deployment

    yield factory
    problems = []
    for deployment in made:
        try:
            await deployment.aclose()
            problems += deployment.tracebacks()
        finally:
            _DEPLOYMENTS.remove(deployment)
    if problems:
        pytest.fail("a replica logged a traceback:\n\n" + "\n\n".join(problems))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[Any]:
    report = yield
    if report.failed:
        for deployment in _DEPLOYMENTS:
            for title, text in deployment.logs():
                report.sections.append((title, text))
    return report
