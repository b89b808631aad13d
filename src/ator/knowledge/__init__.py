"""Org documents and hybrid search (layer: knowledge — an extension of the engine, below
webhooks and subagents, above jobs; imports agent.extension, tools, net, store, errors,
settings).

Documents are versioned and chunked (`chunking.py` states the rule); search fuses BM25
(`ranking.py`, bm25s) with pgvector nearest neighbours by reciprocal rank (`service.py`);
embeddings come from wordllama's model in its wheel or an OpenAI-compatible endpoint
(`embedding.py`); `search_docs` is the agents' tool (`tool.py`).
"""

from ator.knowledge.embedding import (
    Embedder,
    EmbeddingFailed,
    EndpointEmbedder,
    HashingEmbedder,
    WordLlamaEmbedder,
)
from ator.knowledge.extension import KnowledgeExtension, embedder_from_settings
from ator.knowledge.service import (
    CONTENT_TYPES,
    Knowledge,
    Page,
    SearchResult,
    Snippet,
    read_versions,
    vector_support,
)
from ator.store.knowledge import Document, Query, VectorState

__all__ = ["CONTENT_TYPES", "Document", "Embedder", "EmbeddingFailed", "EndpointEmbedder",
           "HashingEmbedder", "Knowledge", "KnowledgeExtension", "Page", "Query",
           "SearchResult", "Snippet", "VectorState", "WordLlamaEmbedder",
           "embedder_from_settings", "read_versions", "vector_support"]
