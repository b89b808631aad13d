"""The fault suite's fixtures: the end-to-end ones (real `ator serve` processes on real
PostgreSQL and Redis, a fresh database per module, replica logs attached to failures)."""

from tests.e2e.conftest import (  # noqa: F401 (fixtures and the report hook, shared)
    databases,
    deployments,
    e2e_database_url,
    pytest_runtest_makereport,
)
