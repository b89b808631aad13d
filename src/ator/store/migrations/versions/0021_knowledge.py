"""Knowledge: org documents, their versions, the current version's chunks, the query log, and
(where the server has pgvector) the embedding cache and the chunks' vectors.

The vector tables exist only when `CREATE EXTENSION vector` succeeds here (the embedded
PostgreSQL ships pgvector; an external server may not have it): search is BM25 alone
without them, and `ator doctor` says so.

Revision ID: 0021
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

#: The vectors' dimension: wordllama's l2_supercat model, and what an OpenAI-compatible
#: endpoint is asked for (`dimensions`). Mirrored in store/knowledge.py.
DIMENSIONS = 256


def _org() -> sa.Column[object]:
    return sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                     nullable=False)


def _created() -> sa.Column[object]:
    return sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                     server_default=sa.text("now()"))


def upgrade() -> None:
    op.create_table(
        "knowledge_documents",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        _org(),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("content_type", sa.Text, nullable=False),
        sa.Column("current_version", sa.Integer, nullable=False),
        _created(),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.CheckConstraint("content_type in ('text/plain','text/markdown')",
                           name="ck_knowledge_documents_type"),
    )
    op.create_index("ix_knowledge_documents_org", "knowledge_documents",
                    ["org_id", "created_at", "id"])
    op.create_table(
        "knowledge_versions",
        sa.Column("document_id", UUID(as_uuid=True),
                  sa.ForeignKey("knowledge_documents.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("sha256", sa.Text, nullable=False),
        sa.Column("created_by", UUID(as_uuid=True), nullable=True),
        _created(),
    )
    # Only the current version's chunks exist: a new version deletes the old one's in the
    # transaction that writes its own, so search cannot return a superseded text.
    op.create_table(
        "knowledge_chunks",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("document_id", UUID(as_uuid=True),
                  sa.ForeignKey("knowledge_documents.id", ondelete="CASCADE"), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("section", sa.Text, nullable=False, server_default=""),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("text_sha256", sa.Text, nullable=False),
    )
    op.create_index("ix_knowledge_chunks_org", "knowledge_chunks", ["org_id"])
    op.create_index("ix_knowledge_chunks_document", "knowledge_chunks", ["document_id", "seq"])
    # Bumped by every write of an org's documents: a replica's BM25 index of the org is
    # current while its generation is.
    op.create_table(
        "knowledge_generations",
        sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("generation", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "knowledge_queries",
        sa.Column("id", UUID(as_uuid=True), primary_key=True),
        _org(),
        sa.Column("query", sa.Text, nullable=False),
        sa.Column("origin", sa.Text, nullable=False),
        sa.Column("thread_id", UUID(as_uuid=True), nullable=True),
        sa.Column("sources", JSONB, nullable=False),
        sa.Column("answered", sa.Boolean, nullable=False),
        _created(),
    )
    op.create_index("ix_knowledge_queries_org", "knowledge_queries",
                    ["org_id", "answered", "created_at"])

    bind = op.get_bind()
    savepoint = bind.begin_nested()
    try:
        bind.execute(sa.text("CREATE EXTENSION IF NOT EXISTS vector"))
    except sa.exc.DBAPIError:
        savepoint.rollback()  # not installed on this server, or not ours to create
        return
    savepoint.commit()
    op.execute(f"""
    CREATE TABLE knowledge_embeddings (
        org_id uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
        model text NOT NULL,
        text_sha256 text NOT NULL,
        embedding vector({DIMENSIONS}) NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (org_id, model, text_sha256))""")
    op.execute(f"""
    CREATE TABLE knowledge_vectors (
        chunk_id uuid PRIMARY KEY REFERENCES knowledge_chunks(id) ON DELETE CASCADE,
        org_id uuid NOT NULL,
        model text NOT NULL,
        embedding vector({DIMENSIONS}) NOT NULL)""")
    op.execute("CREATE INDEX ix_knowledge_vectors_hnsw ON knowledge_vectors "
               "USING hnsw (embedding vector_cosine_ops)")
    op.execute("CREATE INDEX ix_knowledge_vectors_org ON knowledge_vectors (org_id)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS knowledge_vectors")
    op.execute("DROP TABLE IF EXISTS knowledge_embeddings")
    for table in ("knowledge_queries", "knowledge_generations", "knowledge_chunks",
                  "knowledge_versions", "knowledge_documents"):
        op.drop_table(table)
