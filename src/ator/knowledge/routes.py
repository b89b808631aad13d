"""Org documents and knowledge search (layer: knowledge; imports fastapi, pydantic,
agent.routes, store.records, knowledge.*), contributed by the knowledge extension
(`KnowledgeExtension.routes()`).

`/v1/documents`: create (text or markdown), list (oldest first, `limit` + `cursor`), get
(with the current version's text), a new version (`POST …/versions`, superseding the old
one everywhere; `expected_version` makes it conditional: 409 `version_conflict`) and delete.
`/v1/knowledge/search?q=` searches like the `search_docs` tool (logged, origin `api`);
`/v1/knowledge/queries?answered=false` lists the queries no document answered. Members
write, viewers read; another org's document is a 404 `not_found`.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Response
from pydantic import Field

from ator.agent.routes import Body, require, service
from ator.knowledge.service import Knowledge, SearchResult
from ator.store.knowledge import Document
from ator.store.knowledge import Query as LoggedQuery
from ator.store.records import Principal

__all__ = ["DocumentIn", "DocumentVersionIn", "router"]

router = APIRouter(prefix="/v1")


_DOCUMENT_TEXT = ("The document's text (UTF-8; at most the operator's "
                  "ATOR_KNOWLEDGE_DOCUMENT_CHARS characters, 200,000 by default).")


class DocumentIn(Body):
    """An org document: text or markdown, chunked and searchable once stored."""

    title: str = Field(min_length=1, max_length=500)
    text: str = Field(min_length=1, max_length=2_000_000, description=_DOCUMENT_TEXT)
    content_type: str = Field(default="text/markdown", pattern=r"^text/(plain|markdown)$")


class DocumentVersionIn(Body):
    """A new version: it supersedes the current one everywhere (search reads it alone)."""

    text: str = Field(min_length=1, max_length=2_000_000, description=_DOCUMENT_TEXT)
    title: str | None = Field(default=None, min_length=1, max_length=500)
    expected_version: int | None = Field(
        default=None, ge=1, le=2**31 - 1,
        description="Refuse (409 version_conflict) unless this is the current version.")


def document_view(d: Document) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": str(d.id), "title": d.title, "content_type": d.content_type,
        "version": d.version, "created_at": d.created_at.isoformat(),
        "updated_at": d.updated_at.isoformat()}
    if d.body is not None:
        out["text"] = d.body
        out["chunks"] = d.chunks
    return out


def search_view(r: SearchResult) -> dict[str, Any]:
    return {"mode": r.mode, "data": [
        {"document_id": str(s.document_id), "version": s.version, "title": s.title,
         "section": s.section, "text": s.text, "score": s.score} for s in r.snippets]}


def query_view(q: LoggedQuery) -> dict[str, Any]:
    return {"id": str(q.id), "query": q.query, "origin": q.origin,
            "thread_id": str(q.thread_id) if q.thread_id else None, "sources": q.sources,
            "answered": q.answered, "created_at": q.created_at.isoformat()}


@router.post("/documents", status_code=201)
async def create_document(body: DocumentIn, p: Principal = Depends(require("member")),
                          knowledge: Knowledge = Depends(service(Knowledge))) -> dict[str, Any]:
    made = await knowledge.create(p.scope, title=body.title, body=body.text,
                                                content_type=body.content_type)
    return document_view(made)


@router.get("/documents")
async def list_documents(limit: int = Query(default=50, ge=1, le=200),
                         cursor: str | None = Query(default=None, max_length=200),
                         p: Principal = Depends(require("viewer")),
                         knowledge: Knowledge = Depends(service(Knowledge))) -> dict[str, Any]:
    page = await knowledge.documents(p.scope, limit=limit, cursor=cursor)
    return {"data": [document_view(d) for d in page.rows], "next_cursor": page.next_cursor}


@router.get("/documents/{document_id}")
async def get_document(document_id: UUID, p: Principal = Depends(require("viewer")),
                       knowledge: Knowledge = Depends(service(Knowledge))) -> dict[str, Any]:
    return document_view(await knowledge.get(p.scope, document_id))


@router.post("/documents/{document_id}/versions", status_code=201)
async def new_version(document_id: UUID, body: DocumentVersionIn,
                      p: Principal = Depends(require("member")),
                      knowledge: Knowledge = Depends(service(Knowledge))) -> dict[str, Any]:
    made = await knowledge.update(p.scope, document_id, body=body.text,
                                                title=body.title,
                                                expected_version=body.expected_version)
    return document_view(made)


@router.delete("/documents/{document_id}", status_code=204)
async def delete_document(document_id: UUID, p: Principal = Depends(require("member")),
                          knowledge: Knowledge = Depends(service(Knowledge))) -> Response:
    await knowledge.delete(p.scope, document_id)
    return Response(status_code=204)


@router.get("/knowledge/search")
async def search(q: str = Query(min_length=1, max_length=1000),
                 limit: int | None = Query(default=None, ge=1, le=50),
                 p: Principal = Depends(require("viewer")),
                 knowledge: Knowledge = Depends(service(Knowledge))) -> dict[str, Any]:
    found = await knowledge.search(p.scope, q, limit=limit, origin="api")
    return search_view(found)


@router.get("/knowledge/queries")
async def queries(answered: bool | None = None, limit: int = Query(default=50, ge=1, le=200),
                  cursor: str | None = Query(default=None, max_length=200),
                  p: Principal = Depends(require("viewer")),
                  knowledge: Knowledge = Depends(service(Knowledge))) -> dict[str, Any]:
    rows, next_cursor = await knowledge.queries(
        p.scope, answered=answered, limit=limit, cursor=cursor)
    return {"data": [query_view(q) for q in rows], "next_cursor": next_cursor}
