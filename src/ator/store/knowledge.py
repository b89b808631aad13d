"""Knowledge rows and statements (layer: store; imports sqlalchemy, ator.store.*).

`knowledge_documents` (an org's documents and their current version), `knowledge_versions`
(every version's text), `knowledge_chunks` (the current version's chunks only: a new version
deletes the old one's in its own transaction), `knowledge_generations` (one counter per org,
bumped by every write), `knowledge_queries` (the query log) and, where the server has
pgvector, `knowledge_embeddings` (the embedding cache, per org and model, keyed by the
text's SHA-256) and `knowledge_vectors` (the current chunks' vectors, HNSW-indexed).

Vectors cross the driver as pgvector's text form (`[0.1,0.2,…]`) cast in SQL, so no
pgvector client package is needed.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ator.store.database import Connection, Database
from ator.store.scope import Scope

__all__ = [
    "DIMENSIONS",
    "ITERATIVE_SCAN",
    "NEAREST",
    "Chunk",
    "ChunkIn",
    "Document",
    "Query",
    "VectorState",
    "cached_hashes",
    "chunks_by_id",
    "corpus",
    "create_document",
    "delete_document",
    "generation",
    "get_document",
    "list_documents",
    "list_queries",
    "log_query",
    "nearest",
    "new_version",
    "put_embeddings",
    "vector_state",
]

#: The vectors' dimension (the migration's).
DIMENSIONS = 256


@dataclass(frozen=True, slots=True)
class Document:
    id: UUID
    org_id: UUID
    title: str
    content_type: str
    version: int
    created_at: datetime
    updated_at: datetime
    body: str | None = None  # the current version's text, when asked for
    chunks: int | None = None


@dataclass(frozen=True, slots=True)
class ChunkIn:
    seq: int
    section: str
    text: str
    sha256: str  # of the text that is embedded and indexed (title, section and text)


@dataclass(frozen=True, slots=True)
class Chunk:
    id: UUID
    document_id: UUID
    version: int
    title: str
    section: str
    text: str


@dataclass(frozen=True, slots=True)
class Query:
    id: UUID
    query: str
    origin: str
    thread_id: UUID | None
    sources: list[dict[str, Any]]
    answered: bool
    created_at: datetime


@dataclass(frozen=True, slots=True)
class VectorState:
    """What this database offers vector search: the extension available to install, installed
    (with its version), and the migration's vector tables made."""

    available: bool
    version: str | None
    tables: bool


def _document(r: Any, *, body: bool = False) -> Document:
    return Document(r["id"], r["org_id"], r["title"], r["content_type"], r["current_version"],
                    r["created_at"], r["updated_at"], r["body"] if body else None,
                    r["chunks"] if body else None)


# --- documents ------------------------------------------------------------------------------

_BUMP = sa.text("""
INSERT INTO knowledge_generations (org_id, generation) VALUES (:org_id, 1)
ON CONFLICT (org_id) DO UPDATE SET generation = knowledge_generations.generation + 1""")

_INSERT_DOCUMENT = sa.text("""
INSERT INTO knowledge_documents (id, org_id, title, content_type, current_version)
VALUES (:id, :org_id, :title, :content_type, 1)
RETURNING *""")

_INSERT_VERSION = sa.text("""
INSERT INTO knowledge_versions (document_id, version, org_id, title, body, sha256, created_by)
VALUES (:document_id, :version, :org_id, :title, :body, :sha256, :created_by)""")

_INSERT_CHUNKS = sa.text("""
INSERT INTO knowledge_chunks (id, org_id, document_id, version, seq, section, text, text_sha256)
SELECT u.id, :org_id, :document_id, :version, u.seq, u.section, u.text, u.sha
  FROM unnest(CAST(:ids AS uuid[]), CAST(:seqs AS int[]), CAST(:sections AS text[]),
              CAST(:texts AS text[]), CAST(:shas AS text[])) AS u(id, seq, section, text, sha)""")

# The chunks' vectors come from the cache (filled before the transaction): a text embedded
# once is never embedded again, in any document or version of the org.
_INSERT_VECTORS = sa.text("""
INSERT INTO knowledge_vectors (chunk_id, org_id, model, embedding)
SELECT c.id, c.org_id, e.model, e.embedding
  FROM knowledge_chunks c
  JOIN knowledge_embeddings e
    ON e.org_id = c.org_id AND e.model = :model AND e.text_sha256 = c.text_sha256
 WHERE c.document_id = :document_id AND c.version = :version""")

_NEXT_VERSION = sa.text("""
UPDATE knowledge_documents
   SET current_version = current_version + 1, updated_at = now(),
       title = COALESCE(CAST(:title AS text), title)
 WHERE id = :id AND org_id = :org_id
   AND (CAST(:expected AS int) IS NULL OR current_version = CAST(:expected AS int))
RETURNING *""")

_EXISTS = sa.text("SELECT current_version FROM knowledge_documents "
                  "WHERE id = :id AND org_id = :org_id")

_DROP_CHUNKS = sa.text("DELETE FROM knowledge_chunks WHERE document_id = :document_id "
                       "AND org_id = :org_id")


async def _write_version(conn: Connection, scope: Scope, document_id: UUID, version: int, *,
                         title: str, body: str, sha256: str, chunks: Sequence[ChunkIn],
                         model: str | None) -> None:
    await conn.execute(_INSERT_VERSION, {
        "document_id": document_id, "version": version, "org_id": scope.org_id,
        "title": title, "body": body, "sha256": sha256, "created_by": scope.user_id})
    await conn.execute(_INSERT_CHUNKS, {
        "org_id": scope.org_id, "document_id": document_id, "version": version,
        "ids": [uuid.uuid4() for _ in chunks], "seqs": [c.seq for c in chunks],
        "sections": [c.section for c in chunks], "texts": [c.text for c in chunks],
        "shas": [c.sha256 for c in chunks]})
    if model is not None:
        await conn.execute(_INSERT_VECTORS, {"model": model, "document_id": document_id,
                                             "version": version})
    await conn.execute(_BUMP, {"org_id": scope.org_id})


async def create_document(db: Database, scope: Scope, *, title: str, content_type: str,
                          body: str, sha256: str, chunks: Sequence[ChunkIn],
                          model: str | None) -> Document:
    """Version 1 with its chunks (and their vectors from the cache when `model` is set)."""
    async with db.begin() as conn:
        row = (await conn.execute(_INSERT_DOCUMENT, {
            "id": uuid.uuid4(), "org_id": scope.org_id, "title": title,
            "content_type": content_type})).one()
        await _write_version(conn, scope, row["id"], 1, title=title, body=body, sha256=sha256,
                             chunks=chunks, model=model)
    return _document(row)


async def new_version(db: Database, scope: Scope, document_id: UUID, *, title: str | None,
                      body: str, sha256: str, chunks: Sequence[ChunkIn], model: str | None,
                      expected: int | None) -> Document | int | None:
    """The next version, superseding the current one everywhere in one transaction (its
    chunks and vectors deleted). None: no such document in the org; an int: `expected` was
    not the current version, which is returned."""
    async with db.begin() as conn:
        current = (await conn.execute(_EXISTS, {"id": document_id,
                                                "org_id": scope.org_id})).first()
        if current is None:
            return None
        found = (await conn.execute(_NEXT_VERSION, {
            "id": document_id, "org_id": scope.org_id, "expected": expected,
            "title": title})).first()
        if found is None:
            return int(current["current_version"])
        await conn.execute(_DROP_CHUNKS, {"document_id": document_id, "org_id": scope.org_id})
        await _write_version(conn, scope, document_id, found["current_version"],
                             title=found["title"], body=body, sha256=sha256, chunks=chunks,
                             model=model)
    return _document(found)


_GET_DOCUMENT = sa.text("""
SELECT d.*, v.body,
       (SELECT count(*) FROM knowledge_chunks c WHERE c.document_id = d.id) AS chunks
  FROM knowledge_documents d
  JOIN knowledge_versions v ON v.document_id = d.id AND v.version = d.current_version
 WHERE d.id = :id AND d.org_id = :org_id""")

_LIST_DOCUMENTS = sa.text("""
SELECT * FROM knowledge_documents
 WHERE org_id = :org_id
   AND (CAST(:after_at AS timestamptz) IS NULL
        OR (created_at, id) > (CAST(:after_at AS timestamptz), CAST(:after_id AS uuid)))
 ORDER BY created_at, id
 LIMIT :limit""")

_DELETE_DOCUMENT = sa.text(
    "DELETE FROM knowledge_documents WHERE id = :id AND org_id = :org_id RETURNING id")


async def get_document(db: Database, scope: Scope, document_id: UUID) -> Document | None:
    rows = await db.read(_GET_DOCUMENT, {"id": document_id, "org_id": scope.org_id})
    return _document(rows[0], body=True) if rows else None


async def list_documents(db: Database, scope: Scope, *, after: tuple[datetime, UUID] | None,
                         limit: int) -> list[Document]:
    """Oldest first, after the (created_at, id) cursor; `limit` rows at most."""
    rows = await db.read(_LIST_DOCUMENTS, {
        "org_id": scope.org_id, "after_at": after[0] if after else None,
        "after_id": after[1] if after else None, "limit": limit})
    return [_document(r) for r in rows]


async def delete_document(db: Database, scope: Scope, document_id: UUID) -> bool:
    async with db.begin() as conn:
        gone = (await conn.execute(_DELETE_DOCUMENT, {"id": document_id,
                                                      "org_id": scope.org_id})).first()
        if gone is not None:
            await conn.execute(_BUMP, {"org_id": scope.org_id})
    return gone is not None


# --- search ---------------------------------------------------------------------------------

# One statement, one snapshot: the generation and the chunks it counts.
_CORPUS = sa.text("""
SELECT g.generation, c.id, c.document_id, c.version, c.section, c.text, d.title
  FROM (SELECT CAST(:org_id AS uuid) AS org_id) o
  LEFT JOIN knowledge_generations g ON g.org_id = o.org_id
  LEFT JOIN knowledge_chunks c ON c.org_id = o.org_id
  LEFT JOIN knowledge_documents d ON d.id = c.document_id
 ORDER BY c.id""")

_GENERATION = sa.text("SELECT generation FROM knowledge_generations WHERE org_id = :org_id")


async def generation(db: Database, scope: Scope) -> int:
    rows = await db.read(_GENERATION, {"org_id": scope.org_id})
    return int(rows[0][0]) if rows else 0


async def corpus(db: Database, scope: Scope) -> tuple[int, list[Chunk]]:
    """The org's generation and every current chunk (ordered by id)."""
    rows = await db.read(_CORPUS, {"org_id": scope.org_id})
    gen = int(rows[0]["generation"] or 0) if rows else 0
    return gen, [Chunk(r["id"], r["document_id"], r["version"], r["title"], r["section"],
                       r["text"]) for r in rows if r["id"] is not None]


_CHUNKS_BY_ID = sa.text("""
SELECT c.id, c.document_id, c.version, c.section, c.text, d.title
  FROM knowledge_chunks c JOIN knowledge_documents d ON d.id = c.document_id
 WHERE c.id = ANY(CAST(:ids AS uuid[])) AND c.org_id = :org_id""")


async def chunks_by_id(db: Database, scope: Scope, ids: Sequence[UUID]) -> dict[UUID, Chunk]:
    """The chunks among `ids` that are current in the org now (a superseded or deleted one,
    or another org's, is simply absent)."""
    rows = await db.read(_CHUNKS_BY_ID, {"ids": list(ids), "org_id": scope.org_id})
    return {r["id"]: Chunk(r["id"], r["document_id"], r["version"], r["title"], r["section"],
                           r["text"]) for r in rows}


#: Without it, HNSW filters *after* the index scan: with `ef_search` 40 and an org holding a
#: tenth of the vectors, about 4 rows come back where k were asked. pgvector 0.8's iterative
#: scan goes on scanning until k rows pass the filter.
ITERATIVE_SCAN = sa.text("SET LOCAL hnsw.iterative_scan = relaxed_order")

# relaxed_order may return rows slightly out of order: the outer ORDER BY puts them back.
NEAREST = sa.text("""
WITH nearest AS MATERIALIZED (
  SELECT v.chunk_id, v.embedding <=> CAST(:vector AS vector) AS distance
    FROM knowledge_vectors v
   WHERE v.org_id = :org_id AND v.model = :model
   ORDER BY distance
   LIMIT :k)
SELECT chunk_id, distance FROM nearest ORDER BY distance, chunk_id""")


async def nearest(db: Database, scope: Scope, *, model: str, vector: str,
                  k: int) -> list[tuple[UUID, float]]:
    """The org's k nearest chunk vectors by cosine distance (k rows when it has k)."""
    async with db.begin() as conn:
        await conn.execute(ITERATIVE_SCAN)
        rows = await conn.execute(NEAREST, {"org_id": scope.org_id, "model": model,
                                            "vector": vector, "k": k})
    return [(r["chunk_id"], float(r["distance"])) for r in rows]


_CACHED = sa.text("""
SELECT text_sha256 FROM knowledge_embeddings
 WHERE org_id = :org_id AND model = :model AND text_sha256 = ANY(CAST(:shas AS text[]))""")

_PUT_EMBEDDINGS = sa.text("""
INSERT INTO knowledge_embeddings (org_id, model, text_sha256, embedding)
SELECT :org_id, :model, u.sha, CAST(u.vec AS vector)
  FROM unnest(CAST(:shas AS text[]), CAST(:vecs AS text[])) AS u(sha, vec)
ON CONFLICT DO NOTHING""")


async def cached_hashes(db: Database, scope: Scope, model: str,
                        shas: Sequence[str]) -> set[str]:
    rows = await db.read(_CACHED, {"org_id": scope.org_id, "model": model,
                                   "shas": list(shas)})
    return {r[0] for r in rows}


async def put_embeddings(db: Database, scope: Scope, model: str,
                         found: Sequence[tuple[str, str]]) -> None:
    """Cache (text sha256, vector text) pairs; a pair already cached is kept."""
    if found:
        await db.write(_PUT_EMBEDDINGS, {"org_id": scope.org_id, "model": model,
                                         "shas": [s for s, _ in found],
                                         "vecs": [v for _, v in found]})


_VECTOR_STATE = sa.text("""
SELECT (SELECT count(*) > 0 FROM pg_available_extensions WHERE name = 'vector') AS available,
       (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS version,
       to_regclass('knowledge_vectors') IS NOT NULL
         AND to_regclass('knowledge_embeddings') IS NOT NULL AS tables""")


async def vector_state(db: Database) -> VectorState:
    r = (await db.read(_VECTOR_STATE))[0]
    return VectorState(bool(r["available"]), r["version"], bool(r["tables"]))


# --- the query log --------------------------------------------------------------------------

_LOG_QUERY = sa.text("""
INSERT INTO knowledge_queries (id, org_id, query, origin, thread_id, sources, answered)
VALUES (:id, :org_id, :query, :origin, :thread_id, CAST(:sources AS jsonb), :answered)""")

_LIST_QUERIES = sa.text("""
SELECT * FROM knowledge_queries
 WHERE org_id = :org_id AND (CAST(:answered AS boolean) IS NULL OR answered = :answered)
   AND (CAST(:before_at AS timestamptz) IS NULL
        OR (created_at, id) < (CAST(:before_at AS timestamptz), CAST(:before_id AS uuid)))
 ORDER BY created_at DESC, id DESC
 LIMIT :limit""")


async def log_query(db: Database, scope: Scope, *, query: str, origin: str,
                    thread_id: UUID | None, sources: list[dict[str, Any]]) -> None:
    await db.write(_LOG_QUERY, {
        "id": uuid.uuid4(), "org_id": scope.org_id, "query": query, "origin": origin,
        "thread_id": thread_id, "sources": sources, "answered": bool(sources)})


async def list_queries(db: Database, scope: Scope, *, answered: bool | None,
                       before: tuple[datetime, UUID] | None, limit: int) -> list[Query]:
    """Newest first, before the (created_at, id) cursor."""
    rows = await db.read(_LIST_QUERIES, {
        "org_id": scope.org_id, "answered": answered,
        "before_at": before[0] if before else None,
        "before_id": before[1] if before else None, "limit": limit})
    return [Query(r["id"], r["query"], r["origin"], r["thread_id"], r["sources"],
                  r["answered"], r["created_at"]) for r in rows]
