"""Org documents and hybrid search over them (layer: knowledge; imports knowledge.*,
store.knowledge, errors).

`Knowledge` (reached as `Ator.service(Knowledge)`, and by the `search_docs` tool):

- Documents are text/plain or text/markdown, versioned: an edit writes version n+1 and, in
  the same transaction, deletes version n's chunks and vectors, so no search can return a
  superseded text (every version's full text stays readable in `knowledge_versions`).
- Search = BM25 (`ranking.Bm25Index`, per org, rebuilt when the org's generation moved) and,
  where the database has pgvector, the k nearest chunk vectors of the org (HNSW with an
  iterative scan, so the org filter still yields k rows), fused by reciprocal rank. A
  vector hit counts only at a cosine similarity of at least `min_similarity` (nearest
  neighbours always exist; a far one is no answer). The fused chunks are read back by id
  in the org at the end, so a chunk superseded while the search ran is dropped, never shown.
- Embeddings are idempotent by text: a chunk's indexed text is embedded once per org and
  model (cache keyed by its SHA-256), whatever document or version holds it.
- Every search is logged with its sources; one with none is an unanswered query
  (`queries(answered=False)`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal
from uuid import UUID

from ator.errors import Conflict, NotFound, ValidationFailed
from ator.knowledge.chunking import chunk, indexed_text, sha256
from ator.knowledge.embedding import Embedder, vector_text
from ator.knowledge.ranking import Bm25Index, fuse
from ator.store import cursors
from ator.store import knowledge as store
from ator.store.database import Database
from ator.store.scope import Scope

__all__ = ["CONTENT_TYPES", "Knowledge", "Page", "SearchResult", "Snippet", "read_versions",
           "vector_support"]

log = logging.getLogger(__name__)

CONTENT_TYPES = ("text/plain", "text/markdown")
Mode = Literal["hybrid", "bm25", "vector"]


@dataclass(frozen=True, slots=True)
class Snippet:
    document_id: UUID
    version: int
    chunk_id: UUID
    title: str
    section: str
    text: str
    score: float

    def source(self) -> dict[str, object]:
        return {"document_id": str(self.document_id), "version": self.version,
                "chunk_id": str(self.chunk_id), "title": self.title}


@dataclass(frozen=True, slots=True)
class SearchResult:
    query: str
    mode: str  # what ran: hybrid, bm25 (no vectors here) or vector
    snippets: tuple[Snippet, ...]

    @property
    def answered(self) -> bool:
        return bool(self.snippets)


def read_versions(result: SearchResult) -> tuple[tuple[UUID, int], ...]:
    """The (document id, version) pairs a search read, sorted and once each: what an analysis
    that used the result puts into its hash key, so a new version of a document it read
    makes a new analysis."""
    return tuple(sorted({(s.document_id, s.version) for s in result.snippets},
                        key=lambda p: (str(p[0]), p[1])))


async def vector_support(db: Database) -> store.VectorState:
    """Whether this database can hold vectors (pgvector available, installed, tables made)."""
    return await store.vector_state(db)


@dataclass(frozen=True, slots=True)
class Page:
    rows: list[store.Document] = field(default_factory=list)
    next_cursor: str | None = None


class Knowledge:
    def __init__(self, db: Database, embedder: Embedder | None, *, chunk_chars: int = 1000,
                 document_chars: int = 200_000, snippets: int = 5, snippet_chars: int = 1500,
                 min_similarity: float = 0.35, index_cache: int = 64) -> None:
        self.db = db
        self.embedder = embedder
        self.chunk_chars = chunk_chars
        self.document_chars = document_chars
        self.max_snippets = snippets
        self.snippet_chars = snippet_chars
        self.min_similarity = min_similarity
        self._index_cache = index_cache
        self._indexes: OrderedDict[UUID, Bm25Index] = OrderedDict()
        self._building: dict[UUID, asyncio.Lock] = {}
        self.vectors: store.VectorState | None = None  # known after start()

    async def start(self) -> None:
        self.vectors = await store.vector_state(self.db)
        if self.embedder is not None and not self.vectors.tables:
            log.warning("knowledge: this database has no pgvector (vector tables absent): "
                        "search is BM25 alone")

    async def _ready(self) -> None:
        if self.vectors is None:  # an engine not started (engine=False) still searches
            await self.start()

    @property
    def _model(self) -> str | None:
        """The model whose vectors are written and searched, or None: BM25 alone."""
        if self.embedder is None or self.vectors is None or not self.vectors.tables:
            return None
        return self.embedder.model

    # --- documents --------------------------------------------------------------------------

    def _check(self, title: str, body: str, content_type: str) -> list[store.ChunkIn]:
        if content_type not in CONTENT_TYPES:
            raise ValidationFailed(f"content_type must be one of {list(CONTENT_TYPES)}",
                                   code="content_type_unsupported")
        if len(body) > self.document_chars:
            raise ValidationFailed(f"a document is at most {self.document_chars} characters",
                                   code="document_too_large")
        if not body.strip():
            raise ValidationFailed("a document needs some text", code="document_empty")
        pieces = chunk(body, markdown=content_type == "text/markdown",
                       max_chars=self.chunk_chars)
        return [store.ChunkIn(p.seq, p.section, p.text,
                              sha256(indexed_text(title, p.section, p.text))) for p in pieces]

    async def _embed(self, scope: Scope, title: str, chunks: Sequence[store.ChunkIn]) -> None:
        """Fill the org's embedding cache for the chunks not in it yet."""
        model = self._model
        if model is None or self.embedder is None or not chunks:
            return
        wanted = {c.sha256: indexed_text(title, c.section, c.text) for c in chunks}
        cached = await store.cached_hashes(self.db, scope, model, list(wanted))
        missing = [s for s in wanted if s not in cached]
        if not missing:
            return
        vectors = await self.embedder.embed([wanted[s] for s in missing])
        await store.put_embeddings(self.db, scope, model,
                                   [(s, vector_text(v)) for s, v in zip(missing, vectors,
                                                                        strict=True)])

    async def create(self, scope: Scope, *, title: str, body: str,
                     content_type: str = "text/markdown") -> store.Document:
        """Version 1 of a new document. Raises ValidationFailed, EmbeddingFailed (502)."""
        await self._ready()
        chunks = self._check(title, body, content_type)
        await self._embed(scope, title, chunks)
        return await store.create_document(self.db, scope, title=title,
                                           content_type=content_type, body=body,
                                           sha256=sha256(body), chunks=chunks,
                                           model=self._model)

    async def update(self, scope: Scope, document_id: UUID, *, body: str,
                     title: str | None = None,
                     expected_version: int | None = None) -> store.Document:
        """A new version superseding the current one. Raises NotFound, Conflict
        (`version_conflict`: `expected_version` is not the current one)."""
        await self._ready()
        current = await self.get(scope, document_id)
        new_title = title if title is not None else current.title
        chunks = self._check(new_title, body, current.content_type)
        await self._embed(scope, new_title, chunks)
        made = await store.new_version(self.db, scope, document_id, title=title, body=body,
                                       sha256=sha256(body), chunks=chunks, model=self._model,
                                       expected=expected_version)
        if made is None:
            raise NotFound("no such document")
        if isinstance(made, int):
            raise Conflict(f"the document is at version {made}, not {expected_version}",
                           code="version_conflict")
        return made

    async def get(self, scope: Scope, document_id: UUID) -> store.Document:
        """The document with its current version's text. Raises NotFound (another org's too)."""
        found = await store.get_document(self.db, scope, document_id)
        if found is None:
            raise NotFound("no such document")
        return found

    async def documents(self, scope: Scope, *, limit: int = 50,
                        cursor: str | None = None) -> Page:
        after = cursors.decode(cursor) if cursor else None
        rows = await store.list_documents(self.db, scope, after=after, limit=limit + 1)
        return Page(*cursors.page_of(rows, limit))

    async def delete(self, scope: Scope, document_id: UUID) -> None:
        if not await store.delete_document(self.db, scope, document_id):
            raise NotFound("no such document")

    # --- search -----------------------------------------------------------------------------

    async def _bm25(self, scope: Scope) -> Bm25Index:
        org = scope.org_id
        current = await store.generation(self.db, scope)
        cached = self._indexes.get(org)
        if cached is None or cached.generation < current:
            # Concurrent searches of one org in this process share one rebuild.
            lock = self._building.setdefault(org, asyncio.Lock())
            async with lock:
                cached = self._indexes.get(org)
                if cached is None or cached.generation < current:
                    generation, chunks = await store.corpus(self.db, scope)
                    cached = await asyncio.to_thread(Bm25Index.build, generation, chunks)
                    self._indexes[org] = cached
            if not lock.locked():
                self._building.pop(org, None)
        self._indexes.move_to_end(org)
        while len(self._indexes) > self._index_cache:
            self._indexes.popitem(last=False)
        return cached

    async def _nearest(self, scope: Scope, query: str, k: int) -> list[UUID]:
        model = self._model
        if model is None or self.embedder is None:
            return []
        vector = (await self.embedder.embed([query]))[0]
        found = await store.nearest(self.db, scope, model=model, vector=vector_text(vector),
                                    k=k)
        return [ident for ident, distance in found if 1.0 - distance >= self.min_similarity]

    async def search(self, scope: Scope, query: str, *, limit: int | None = None,
                     origin: str = "api", thread_id: UUID | None = None,
                     mode: Mode = "hybrid", log_query: bool = True) -> SearchResult:
        """At most `limit` (≤ the operator's N) snippets of the org's current documents, best
        first, logged with their sources. `mode` bm25/vector runs one ranking alone (for
        comparison); hybrid without pgvector is BM25 alone and says so in `mode`."""
        await self._ready()
        query = query.strip()
        if not query:
            raise ValidationFailed("a query needs some text", code="query_empty")
        n = min(limit or self.max_snippets, self.max_snippets)
        depth = max(4 * n, 20)  # each ranking's depth before fusion
        if mode == "vector" and self._model is None:
            raise ValidationFailed("this database has no vector search (pgvector)",
                                   code="vector_search_unavailable")
        rankings: dict[str, list[UUID]] = {}
        if mode in ("hybrid", "bm25"):
            rankings["bm25"] = [i for i, _ in (await self._bm25(scope)).search(query, depth)]
        if mode in ("hybrid", "vector") and self._model is not None:
            rankings["vector"] = await self._nearest(scope, query, depth)
        fused = fuse(rankings)[: 2 * n]
        current = await store.chunks_by_id(self.db, scope, [i for i, _ in fused])
        snippets = tuple(
            Snippet(c.document_id, c.version, c.id, c.title, c.section,
                    c.text[: self.snippet_chars], score)
            for c, score in ((current.get(i), s) for i, s in fused) if c is not None)[:n]
        result = SearchResult(query, "hybrid" if len(rankings) == 2 else next(iter(rankings)),
                              snippets)
        if log_query:
            await store.log_query(self.db, scope, query=query[:2000], origin=origin,
                                  thread_id=thread_id,
                                  sources=[s.source() for s in snippets])
        return result

    async def queries(self, scope: Scope, *, answered: bool | None = None, limit: int = 50,
                      cursor: str | None = None) -> tuple[list[store.Query], str | None]:
        """The query log, newest first (answered=False: the unanswered queries)."""
        before = cursors.decode(cursor) if cursor else None
        rows = await store.list_queries(self.db, scope, answered=answered, before=before,
                                        limit=limit + 1)
        return cursors.page_of(rows, limit)
