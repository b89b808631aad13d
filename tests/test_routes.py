"""No route of the API shadows another: each route's own paths reach it first, in the order
the app tries the core's routers (api/app.py `CORE_ROUTERS`, ordered for cost alone), then
the extensions' and the gateway's."""

from __future__ import annotations

import re

from fastapi.routing import APIRoute

from ator.api.app import CORE_ROUTERS

_PARAM = re.compile(r"\{[^}:]+(:[^}]+)?\}")


def _routes() -> list[APIRoute]:
    return [r for router in CORE_ROUTERS for r in router.routes if isinstance(r, APIRoute)]


def _first(routes: list[APIRoute], method: str, path: str) -> APIRoute | None:
    return next((r for r in routes if r.path_regex.match(path) and method in r.methods), None)


def test_every_route_is_the_first_to_match_its_own_paths() -> None:
    routes = _routes()
    assert len(routes) > 100
    checked = 0
    for route in routes:
        # Each parameter as an id and as a word: a literal segment of another route (/me,
        # /search) is a word, so a parameterised route ahead of it would take it.
        for fill in ("00000000-0000-0000-0000-000000000001", "x"):
            path = _PARAM.sub(fill, route.path)
            if not route.path_regex.match(path):
                continue
            for method in route.methods:
                first = _first(routes, method, path)
                assert first is not None and (first.path, first.name) == (route.path, route.name), (
                    f"{method} {path}: {first.path if first else None} is tried before "
                    f"{route.path}")
                checked += 1
    assert checked > 100
