"""Input builders: what an analysis reads for its target (layer: analyses; imports
ator.errors, ator.store).

A builder is `async (ctx, target, options) -> dict | None`; None is "nothing to analyze"
(the run ends without a model call or a record). It reads only the org's own records
through `ctx` (an org-scoped `Scope`). The ones an org can name in a spec:

- `{"source": "payload"}`: `options.payload` as given by the trigger (an object);
- `{"source": "thread", "last": N}`: the target thread's last N messages as text;
- `{"source": "analysis", "kind": K}`: the target's latest analysis of kind K (a chain's
  previous step), as `{"previous": output}`;
- `{"source": "document"}`: the target org document's current version (knowledge), as
  `{"document_id", "title", "version", "text"}`.

Documents read: a builder that reads an org document calls `ctx.read_document(id,
version)`; the (id, version) pairs go into the hash key, so a new version of a document is a
new input (the `document` builder does; a builder reading search results passes
`knowledge.read_versions(result)` the same way).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from ator.errors import ValidationFailed
from ator.store import analyses as store
from ator.store import knowledge as knowledge_store
from ator.store.database import Database
from ator.store.scope import Scope

__all__ = ["InputBuilder", "InputContext", "builder_from_spec", "document", "from_analysis",
           "payload", "thread"]


@dataclass(slots=True)
class InputContext:
    db: Database
    scope: Scope
    documents: list[tuple[str, int]] = field(default_factory=list)

    def read_document(self, document_id: str, version: int) -> None:
        """Note that the input read this version of a document (it joins the hash key)."""
        self.documents.append((str(document_id), int(version)))


InputBuilder = Callable[[InputContext, str, dict[str, Any]], Awaitable[dict[str, Any] | None]]


async def payload(ctx: InputContext, target: str, options: dict[str, Any]
                  ) -> dict[str, Any] | None:
    value = options.get("payload")
    return dict(value) if isinstance(value, dict) and value else None


def thread(last: int = 20) -> InputBuilder:
    async def build(ctx: InputContext, target: str, options: dict[str, Any]
                    ) -> dict[str, Any] | None:
        try:
            thread_id = UUID(target)
        except ValueError:
            return None
        messages = await store.thread_messages(ctx.db, ctx.scope, thread_id, last)
        return {"thread_id": target, "messages": messages} if messages else None

    return build


def from_analysis(kind: str) -> InputBuilder:
    async def build(ctx: InputContext, target: str, options: dict[str, Any]
                    ) -> dict[str, Any] | None:
        found = await store.list_analyses(ctx.db, ctx.scope, kind=kind, target=target, limit=1)
        return {"previous": found[0].output, "previous_kind": kind} if found else None

    return build


async def document(ctx: InputContext, target: str, options: dict[str, Any]
                   ) -> dict[str, Any] | None:
    try:
        document_id = UUID(target)
    except ValueError:
        return None
    found = await knowledge_store.get_document(ctx.db, ctx.scope, document_id)
    if found is None or not found.body:
        return None
    ctx.read_document(str(found.id), found.version)
    return {"document_id": target, "title": found.title, "version": found.version,
            "text": found.body}


def builder_from_spec(raw: Any) -> InputBuilder:
    """The builder an org's spec names (default: the payload). Raises ValidationFailed."""
    if raw is None:
        return payload
    if not isinstance(raw, dict):
        raise ValidationFailed("input is {\"source\": payload | thread | analysis}",
                               code="invalid_kind")
    source = raw.get("source", "payload")
    if source == "payload":
        return payload
    if source == "thread":
        last = raw.get("last", 20)
        if isinstance(last, bool) or not isinstance(last, int) or not 1 <= last <= 200:
            raise ValidationFailed("input.last is between 1 and 200", code="invalid_kind")
        return thread(last)
    if source == "analysis" and isinstance(raw.get("kind"), str):
        return from_analysis(raw["kind"])
    if source == "document":
        return document
    raise ValidationFailed("input.source is payload, thread, document or analysis (with a "
                           "kind)",
                           code="invalid_kind")
