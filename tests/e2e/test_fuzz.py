"""Schema-driven fuzzing of the live server: every operation in its /openapi.json, with the
operator's admin key, a bounded number of generated requests each (valid and invalid ones);
none may answer 5xx.

Hypothesis runs per operation from inside one test rather than through schemathesis's pytest
plugin (`schemathesis.pytest.from_fixture` reads `Function._nodeid`, which pytest 9 no longer
has). Every operation is fuzzed even when an earlier one fails, and the failures are reported
together, each with a curl command to reproduce it.

Values PostgreSQL cannot store (NUL in text or JSON, NaN and 1e400 in JSON, a month whose
successor does not exist) once answered 500; `test_unstorable_values_are_client_errors` pins
each reproduction as a 4xx problem.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tests.e2e.conftest import Deployment, DeploymentFactory
from tests.e2e.replica import Replica

pytestmark = pytest.mark.e2e

EXAMPLES = {GenerationMode.POSITIVE: 30, GenerationMode.NEGATIVE: 15}


@pytest.fixture(scope="module")
def fuzzed(deployments: DeploymentFactory) -> tuple[Deployment, Replica]:
    # No rate limit: the fuzzer is one user sending far more than 600 requests a minute.
    deployment = deployments(ATOR_RATE_LIMIT_PER_MINUTE=0)
    return deployment, deployment.start("fuzzed")


# 45 examples for each of the API's 134 route handlers' operations take about two minutes on 2
# cores: it hit the suite's 120 s default in a clean-clone CI and alone (beside the fault suite).
@pytest.mark.timeout(420)
async def test_no_operation_answers_5xx(fuzzed: tuple[Deployment, Replica]) -> None:
    deployment, replica = fuzzed
    schema = await asyncio.to_thread(schemathesis.openapi.from_url,
                                     f"{replica.url}/openapi.json", timeout=10)
    headers = {"Authorization": f"Bearer {deployment.admin_key}"}

    failures: list[str] = []
    fuzzed_operations = set()
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode, examples in EXAMPLES.items():
            strategy = operation.as_strategy(generation_mode=mode)

            @given(case=strategy)
            # No shrink phase and no example database: bounded time, nothing left on disk.
            @settings(max_examples=examples, deadline=None, database=None,
                      phases=[Phase.explicit, Phase.generate],
                      suppress_health_check=list(HealthCheck))
            def fuzz(case: schemathesis.Case) -> None:
                case.call_and_validate(base_url=replica.url, headers=headers,
                                       checks=[not_a_server_error], timeout=30)

            try:
                await _off_loop(fuzz)
            except Unsatisfiable:
                # Nothing of the operation can be made invalid (no parameters, no body).
                assert mode is GenerationMode.NEGATIVE, operation.label
            except (Exception, BaseExceptionGroup) as failure:  # a FailureGroup is the latter
                failures.append(f"{operation.label} ({mode.value}):\n{failure}")
            fuzzed_operations.add(operation.label)
    assert len(fuzzed_operations) >= 20, sorted(fuzzed_operations)
    assert not failures, "\n\n".join(failures)


async def _off_loop(fn: Callable[[], None]) -> None:
    """Run the blocking Hypothesis loop in a thread: the session's event loop stays free."""
    await asyncio.to_thread(fn)


_SETUP = {"name": "s", "provider": "scripted", "model": "scripted"}


def _setup_with(config: str) -> str:
    """A setup body with `config` spliced in raw: NaN and 1e400 are not valid JSON, but
    Python's json.loads (and so the server) accepts them."""
    return json.dumps(_SETUP)[:-1] + f', "config": {config}}}'


Raw = Callable[[dict[str, str]], str | None]  # the ids of a fresh setup and thread -> body

# name -> (method, path, raw body). Each answered 500 once; a 4xx problem is what it should be.
UNSTORABLE: dict[str, tuple[str, str, Raw]] = {
    "nul-in-org-name": ("POST", "/v1/orgs", lambda _: '{"name": "a\\u0000b"}'),
    "nul-in-key-name": ("POST", "/v1/api-keys", lambda _: json.dumps(
        {"name": "k\x00", "role": "viewer", "email": "nul@e2e.test"})),
    "nul-in-setup-config": ("POST", "/v1/setups", lambda _: _setup_with('{"x": "a\\u0000"}')),
    "nul-in-setup-config-key": ("POST", "/v1/setups", lambda _: _setup_with('{"a\\u0000": 1}')),
    "nan-in-setup-config": ("POST", "/v1/setups", lambda _: _setup_with('{"x": NaN}')),
    "infinity-in-setup-config": ("POST", "/v1/setups", lambda _: _setup_with('{"x": 1e400}')),
    "usage-month-9999-12": ("GET", "/v1/usage?month=9999-12", lambda _: None),
    "nul-in-thread-title": ("POST", "/v1/threads", lambda ids: json.dumps(
        {"setup_id": ids["setup_id"], "title": "t\x00"})),
    "nul-in-thread-metadata": ("POST", "/v1/threads", lambda ids: json.dumps(
        {"setup_id": ids["setup_id"], "metadata": {"k": "\x00"}})),
    "nul-in-message-text": ("POST", "/v1/threads/{thread_id}/messages",
                            lambda _: '{"text": "hi\\u0000"}'),
}


@pytest.mark.parametrize("name", list(UNSTORABLE))
async def test_unstorable_values_are_client_errors(
    name: str, fuzzed: tuple[Deployment, Replica]
) -> None:
    deployment, replica = fuzzed
    method, path, raw = UNSTORABLE[name]
    headers = {"Authorization": f"Bearer {deployment.admin_key}",
               "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=replica.url, headers=headers, timeout=30) as http:
        setup = (await http.post("/v1/setups", json=_SETUP)).json()
        thread = (await http.post("/v1/threads", json={"setup_id": setup["id"]})).json()
        ids = {"setup_id": setup["id"], "thread_id": thread["id"]}
        response = await http.request(method, path.format(**ids), content=raw(ids))
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
