"""One concept, one place: the roles are defined once (security.roles) and every reader
agrees with it, and no module outside `store/` speaks SQL."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import ator
from ator.api.schemas import KeyIn
from ator.security.roles import ROLES, Role, has_role
from ator.store import schema

SRC = Path(ator.__file__).parent


def test_roles_are_defined_once_and_every_reader_agrees() -> None:
    assert ROLES == get_args(Role) == ("admin", "member", "viewer")
    assert get_args(KeyIn.model_fields["role"].annotation) == ROLES
    checks = {c.name: str(c.sqltext) for t in (schema.users, schema.api_keys)
              for c in t.constraints if c.name in ("ck_users_role", "ck_api_keys_role")}
    allowed = "role in (" + ",".join(f"'{r}'" for r in ROLES) + ")"
    assert checks == {"ck_users_role": allowed, "ck_api_keys_role": allowed}
    order = ["viewer", "member", "admin"]
    assert [[has_role(r, n) for n in order] for r in order] == [
        [True, False, False], [True, True, False], [True, True, True]]
    assert not has_role("owner", "viewer")
    tables = [p for p in SRC.rglob("*.py") if '{"viewer": 0' in p.read_text()]
    assert tables == [SRC / "security" / "roles.py"]  # no second table of ranks


def test_no_sql_outside_store() -> None:
    """SQL (sqlalchemy, asyncpg, text statements) lives in `store/` only."""
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] == "store":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] in ("sqlalchemy", "asyncpg") for n in names):
                offenders.append(str(rel))
    assert offenders == []
