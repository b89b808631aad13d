"""The editable prompt layers: an org's policy and a thread's instructions, versioned
(layer: store; imports sqlalchemy, ator.store.*).

The text in force sits on its owner's row (`orgs.policy`, `threads.instructions`), where the
statement that starts a turn reads it; each edit bumps the row's version and records the new
version in `prompt_versions`, in one statement. Version 0 is what the org or thread started
with (no row). An edit may name the version it expects (`if_version`): another edit since
then is a Conflict rather than a silent overwrite.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import sqlalchemy as sa

from ator.errors import Conflict, NotFound
from ator.security.limits import INSTRUCTIONS_CHARS, check_text
from ator.store.database import Database
from ator.store.scope import Scope

__all__ = ["LayerText", "LayerVersion", "get_layer", "layer_versions", "set_layer"]

ORG_POLICY = "org_policy"
THREAD = "thread"


@dataclass(frozen=True, slots=True)
class LayerText:
    layer: str  # "org_policy" or "thread"
    text: str
    version: int
    replace: bool


@dataclass(frozen=True, slots=True)
class LayerVersion:
    version: int
    text: str
    replace: bool
    set_by: UUID | None
    set_at: datetime


# Per layer: the owner row's table, text/version/replace columns and its WHERE clause.
_OWNER = {
    ORG_POLICY: ("orgs", "policy", "policy_version", "policy_replace", "id = :org_id"),
    THREAD: ("threads", "instructions", "instructions_version", "false",
             "id = :thread_id AND org_id = :org_id AND deleted_at IS NULL"),
}


def _set_sql(layer: str) -> sa.TextClause:
    table, text, version, replace, where = _OWNER[layer]
    set_replace = f", {replace} = :replace" if layer == ORG_POLICY else ""
    return sa.text(f"""
WITH _cur AS (
  SELECT {version} AS version FROM {table} WHERE {where}
), _upd AS (
  UPDATE {table} SET {text} = :text, {version} = {version} + 1{set_replace}
   WHERE {where} AND (CAST(:if_version AS integer) IS NULL OR {version} = :if_version)
  RETURNING {version} AS version
), _ins AS (
  INSERT INTO prompt_versions (org_id, layer, thread_id, version, text, replace, set_by)
  SELECT :org_id, :layer, CAST(:thread_id AS uuid), version, :text, :replace, :set_by FROM _upd
  RETURNING version
)
SELECT (SELECT version FROM _cur) AS current, (SELECT version FROM _ins) AS version
""")


def _get_sql(layer: str) -> sa.TextClause:
    table, text, version, replace, where = _OWNER[layer]
    return sa.text(f"SELECT {text} AS text, {version} AS version, {replace} AS replace "
                   f"FROM {table} WHERE {where}")


def _params(scope: Scope, layer: str, thread_id: UUID | None) -> dict[str, object]:
    if layer not in _OWNER:
        raise ValueError(f"unknown prompt layer {layer!r}")
    if (layer == THREAD) != (thread_id is not None):
        raise ValueError("a thread's layer needs its thread id, the org's none")
    return {"org_id": scope.org_id, "thread_id": thread_id, "layer": layer}


async def set_layer(
    db: Database, scope: Scope, layer: str, text: str, *, thread_id: UUID | None = None,
    replace: bool = False, if_version: int | None = None,
) -> LayerText:
    """Set the layer's text (and, for the org policy, `replace`); returns the new version.
    Raises NotFound (no such thread in this org, or deleted) and Conflict (`if_version` is
    not the version in force); ValidationFailed for text that is too long or holds NUL."""
    check_text(text, ("text",), INSTRUCTIONS_CHARS)
    params = {**_params(scope, layer, thread_id), "text": text, "replace": replace,
              "if_version": if_version, "set_by": scope.user_id}
    row = (await db.fetch(_set_sql(layer), params, write=True))[0]
    if row["current"] is None:
        raise NotFound("thread not found" if layer == THREAD else "org not found")
    if row["version"] is None:
        raise Conflict(f"version {if_version} is not the one in force (it is "
                       f"{row['current']}): reload and retry", code="version_conflict")
    return LayerText(layer, text, row["version"], replace and layer == ORG_POLICY)


async def get_layer(
    db: Database, scope: Scope, layer: str, *, thread_id: UUID | None = None
) -> LayerText:
    """The layer in force. Raises NotFound for another org's (or a deleted) thread."""
    rows = await db.fetch(_get_sql(layer), _params(scope, layer, thread_id), write=False)
    if not rows:
        raise NotFound("thread not found" if layer == THREAD else "org not found")
    r = rows[0]
    return LayerText(layer, r["text"], r["version"], bool(r["replace"]))


_VERSIONS = sa.text("""
SELECT version, text, replace, set_by, set_at FROM prompt_versions
 WHERE org_id = :org_id AND layer = :layer
   AND thread_id IS NOT DISTINCT FROM CAST(:thread_id AS uuid)
 ORDER BY version DESC LIMIT :limit
""")


async def layer_versions(
    db: Database, scope: Scope, layer: str, *, thread_id: UUID | None = None, limit: int = 50
) -> list[LayerVersion]:
    """Every version set by an edit, newest first (the caller checks the owner exists)."""
    params = {**_params(scope, layer, thread_id), "limit": limit}
    return [LayerVersion(r["version"], r["text"], r["replace"], r["set_by"], r["set_at"])
            for r in await db.fetch(_VERSIONS, params, write=False)]
