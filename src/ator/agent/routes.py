"""What a feature's HTTP routes are built with (layer: agent; imports fastapi, pydantic,
security.limits, security.roles, store.records).

A feature's extension contributes its routers (`Extension.routes()`); the HTTP API mounts
those of the engine's extensions, so adding a feature does not touch the app. The routers live
with their feature, below the API, so they cannot import it: what they need of it comes
through here, resolved per request from the app that mounted them.

- `require(role)`: the caller, admitted with at least `role`: the API's own authentication
  (key or session cookie, CSRF on writes, rate limit), installed by the app as
  `app.state.authenticate`
- `service(Kind)`: one of the engine's services, by type (`Ator.service(Kind)`)
- `Body`: the base of every request body (unknown fields and NUL refused)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cache
from typing import Any, Protocol, TypeVar

from fastapi import Request
from pydantic import BaseModel, ConfigDict, model_validator

from ator.security.limits import check_storable
from ator.security.roles import has_role
from ator.store.records import Principal

T = TypeVar("T")

__all__ = ["Authenticate", "Body", "require", "service"]


class Authenticate(Protocol):
    """The API's authentication (`app.state.authenticate`): the request's principal with at
    least `role`; raises the API's typed errors (401, 403 forbidden or csrf, 429)."""

    async def __call__(self, request: Request, role: str) -> Principal: ...


class _Runtime(Protocol):
    def service(self, kind: type[T]) -> T: ...


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        # NUL in any field is refused here, for every body, with `unstorable_value` (a
        # ValidationFailed passes through pydantic to the problem handler): never the
        # database's own "invalid byte sequence".
        check_storable(data)
        return data


@cache  # one dependency per role, so FastAPI resolves it once per request
def require(role: str) -> Callable[[Request], Awaitable[Principal]]:
    """A dependency admitting principals with at least `role` (viewer < member < admin)."""
    has_role(role, role)  # an unknown role fails here, at import, not on a request

    async def dependency(request: Request) -> Principal:
        authenticate: Authenticate = request.app.state.authenticate
        return await authenticate(request, role)

    return dependency


def service(kind: type[T]) -> Callable[[Request], Awaitable[T]]:
    """A dependency giving the engine's service of type `kind`."""

    async def dependency(request: Request) -> T:
        # async: FastAPI would run a plain `def` dependency on its thread pool
        runtime: _Runtime = request.app.state.ator
        return runtime.service(kind)

    return dependency
