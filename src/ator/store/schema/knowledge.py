"""Knowledge tables: documents, versions, chunks, generations and the query log.

Layer: store; imports sqlalchemy and ator.store.schema.columns only. Part of
`ator.store.schema`, on its one `metadata` (see that package's docstring).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB, UUID

from ator.store.schema.columns import _created, _id, _now, _org, _org_hot, metadata

__all__ = [
    "OPTIONAL_TABLES",
    "knowledge_chunks",
    "knowledge_documents",
    "knowledge_generations",
    "knowledge_queries",
    "knowledge_versions",
]

# Knowledge (ator.knowledge, store/knowledge.py): an org's documents, every version's text,
# the current version's chunks (the only ones search reads), a generation per org (bumped by
# every write: a replica's BM25 index is current while it is) and the query log.
knowledge_documents = sa.Table(
    "knowledge_documents",
    metadata,
    _id(),
    _org(),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("content_type", sa.Text, nullable=False),
    sa.Column("current_version", sa.Integer, nullable=False),
    _created(),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.CheckConstraint("content_type in ('text/plain','text/markdown')",
                       name="ck_knowledge_documents_type"),
    sa.Index("ix_knowledge_documents_org", "org_id", "created_at", "id"),
)


knowledge_versions = sa.Table(
    "knowledge_versions",
    metadata,
    sa.Column("document_id", UUID(as_uuid=True),
              sa.ForeignKey("knowledge_documents.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    _org_hot(),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("sha256", sa.Text, nullable=False),
    sa.Column("created_by", UUID(as_uuid=True), nullable=True),
    _created(),
)


knowledge_chunks = sa.Table(
    "knowledge_chunks",
    metadata,
    _id(),
    _org_hot(),
    sa.Column("document_id", UUID(as_uuid=True),
              sa.ForeignKey("knowledge_documents.id", ondelete="CASCADE"), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("section", sa.Text, nullable=False, server_default=""),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("text_sha256", sa.Text, nullable=False),
    sa.Index("ix_knowledge_chunks_org", "org_id"),
    sa.Index("ix_knowledge_chunks_document", "document_id", "seq"),
)


knowledge_generations = sa.Table(
    "knowledge_generations",
    metadata,
    sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("generation", sa.BigInteger, nullable=False),
)


knowledge_queries = sa.Table(
    "knowledge_queries",
    metadata,
    _id(),
    _org(),
    sa.Column("query", sa.Text, nullable=False),
    sa.Column("origin", sa.Text, nullable=False),
    sa.Column("thread_id", UUID(as_uuid=True), nullable=True),
    sa.Column("sources", JSONB, nullable=False),
    sa.Column("answered", sa.Boolean, nullable=False),
    _created(),
    sa.Index("ix_knowledge_queries_org", "org_id", "answered", "created_at"),
)


#: Tables the knowledge migration makes only where the server has pgvector (their `vector`
#: columns have no SQLAlchemy type here): not mirrored, and left out of the comparison.
OPTIONAL_TABLES = frozenset({"knowledge_embeddings", "knowledge_vectors"})

