"""Knowledge as an extension of the engine (layer: knowledge; imports agent.extension, net,
errors, knowledge.*).

What it contributes: the `Knowledge` service (documents, search, the query log), the
native `search_docs` tool and its routes (knowledge.routes). The embedder follows
`ATOR_KNOWLEDGE_EMBEDDER`; at start the service learns whether the database has pgvector's
tables (else search is BM25 alone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ator.agent.extension import Extension, Kernel
from ator.errors import ConfigError
from ator.knowledge.embedding import Embedder, EndpointEmbedder, WordLlamaEmbedder
from ator.knowledge.service import Knowledge
from ator.knowledge.tool import search_docs_tool
from ator.net import Egress
from ator.settings import Settings
from ator.tools.base import Tool

__all__ = ["KnowledgeExtension", "embedder_from_settings"]


def embedder_from_settings(settings: Settings) -> Embedder | None:
    if settings.knowledge_embedder == "none":
        return None
    if settings.knowledge_embedder == "wordllama":
        return WordLlamaEmbedder()
    url = settings.knowledge_embeddings_url
    if not url:
        raise ConfigError("ATOR_KNOWLEDGE_EMBEDDER=endpoint needs ATOR_KNOWLEDGE_EMBEDDINGS_URL")
    key = settings.knowledge_embeddings_api_key
    # The operator's own endpoint: allowed even on a private network, like ATOR_*_BASE_URL.
    return EndpointEmbedder(Egress.from_settings(settings).for_endpoint(url), base_url=url,
                            model=settings.knowledge_embeddings_model,
                            api_key=key.get_secret_value() if key else None)


class KnowledgeExtension(Extension):
    name = "knowledge"

    def __init__(self, kernel: Kernel, embedder: Embedder | str | None = "settings") -> None:
        s = kernel.settings
        self.embedder = embedder_from_settings(s) if isinstance(embedder, str) else embedder
        self.knowledge = Knowledge(
            kernel.db, self.embedder, chunk_chars=s.knowledge_chunk_chars,
            document_chars=s.knowledge_document_chars, snippets=s.knowledge_snippets,
            snippet_chars=s.knowledge_snippet_chars,
            min_similarity=s.knowledge_min_similarity, index_cache=s.knowledge_index_cache)

    def tools(self) -> Sequence[Tool]:
        return [search_docs_tool(self.knowledge.max_snippets)]

    def routes(self) -> Sequence[Any]:
        from ator.knowledge.routes import router  # fastapi: only where an HTTP API mounts it

        return (router,)

    def services(self) -> Mapping[type, object]:
        return {Knowledge: self.knowledge}

    async def start(self) -> None:
        await self.knowledge.start()

    async def aclose(self) -> None:
        if self.embedder is not None:
            await self.embedder.aclose()
