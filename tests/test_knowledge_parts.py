"""Knowledge's parts without a database: the chunking rule, reciprocal rank fusion, the
default embedder loading from its wheel with downloads disabled, and an OpenAI-compatible
embeddings endpoint (a real HTTP server on loopback) reached through the egress guard."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from ator.knowledge.chunking import chunk
from ator.knowledge.embedding import EmbeddingFailed, EndpointEmbedder, WordLlamaEmbedder
from ator.knowledge.extension import embedder_from_settings
from ator.knowledge.ranking import fuse
from ator.net import Egress
from ator.settings import Settings


def test_chunks_follow_headings_and_the_size_limit() -> None:
    text = ("# Guide\n\nIntro paragraph.\n\n## Setup\n\n" + "Step one is long. " * 30
            + "\n\n```\ncode\n\nstill code\n```\n\n## Use\n\nshort\n")
    pieces = chunk(text, markdown=True, max_chars=200)
    assert pieces[0].section == "Guide" and pieces[0].text == "Intro paragraph."
    assert {p.section for p in pieces} == {"Guide", "Guide > Setup", "Guide > Use"}
    assert all(len(p.text) <= 200 for p in pieces)
    assert any("```\ncode\n\nstill code\n```" in p.text for p in pieces)  # one fenced block
    assert [p.seq for p in pieces] == list(range(len(pieces)))
    assert pieces[-1].text == "short"
    # Plain text: a '#' line is text, not a heading.
    plain = chunk("# not a heading\n\nbody", markdown=False, max_chars=200)
    assert [(p.section, p.text) for p in plain] == [("", "# not a heading\n\nbody")]
    assert chunk("  \n\n ", markdown=True, max_chars=200) == []


def test_reciprocal_rank_fusion() -> None:
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    fused = fuse({"bm25": [a, b], "vector": [c, b]})
    assert [i for i, _ in fused] == [b, a, c]
    assert math.isclose(dict(fused)[b], 2 / 62)


async def test_the_default_embedder_loads_from_its_wheel_offline() -> None:
    embedder = WordLlamaEmbedder()
    vectors = await embedder.embed(["refund of an order", "money back for a purchase",
                                    "fire alarm"])
    assert len(vectors) == 3 and all(len(v) == 256 for v in vectors)
    assert math.isclose(sum(x * x for x in vectors[0]), 1.0, rel_tol=1e-4)
    near = sum(x * y for x, y in zip(vectors[0], vectors[1], strict=True))
    far = sum(x * y for x, y in zip(vectors[0], vectors[2], strict=True))
    assert near > far


class Endpoint:
    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self.dimensions = 256

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.seen.append((request.headers.get("authorization", ""), body))
        data = [{"index": i, "embedding": [1.0] + [0.0] * (self.dimensions - 1)}
                for i in range(len(body["input"]))][::-1]  # out of order, like some servers
        return web.Response(text=json.dumps({"data": data}), content_type="application/json")


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[Endpoint, str]]:
    served = Endpoint()
    app = web.Application()
    app.router.add_post("/v1/embeddings", served.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield served, f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


async def test_an_embeddings_endpoint_through_the_egress_guard(
        endpoint: tuple[Endpoint, str], tmp_path: Any) -> None:
    served, url = endpoint
    settings = Settings(data_dir=tmp_path, knowledge_embedder="endpoint",
                        knowledge_embeddings_url=url, knowledge_embeddings_model="m",
                        knowledge_embeddings_api_key="sk-test")
    embedder = embedder_from_settings(settings)  # the operator's endpoint: loopback allowed
    assert isinstance(embedder, EndpointEmbedder)
    try:
        vectors = await embedder.embed(["a", "b"])
    finally:
        await embedder.aclose()
    assert [len(v) for v in vectors] == [256, 256]
    assert served.seen[0][0] == "Bearer sk-test"
    assert served.seen[0][1] == {"model": "m", "input": ["a", "b"], "dimensions": 256,
                                 "encoding_format": "float"}

    served.dimensions = 3
    wrong = embedder_from_settings(settings)
    assert wrong is not None
    with pytest.raises(EmbeddingFailed, match="256-dimension"):
        await wrong.embed(["a"])
    await wrong.aclose()

    # The same loopback URL on the plain rule (not the operator's endpoint) is refused.
    refused = EndpointEmbedder(Egress.from_settings(settings), base_url=url, model="m",
                               api_key=None)
    with pytest.raises(EmbeddingFailed, match="refused") as caught:
        await refused.embed(["a"])
    await refused.aclose()
    assert caught.value.code == "embedding_failed" and caught.value.status == 502
    assert len(served.seen) == 2  # the refused request never reached the server


def test_the_knowledge_package_exports_what_it_names() -> None:
    import ator.knowledge

    assert sorted(ator.knowledge.__all__) == [
        "CONTENT_TYPES", "Document", "Embedder", "EmbeddingFailed", "EndpointEmbedder",
        "HashingEmbedder", "Knowledge", "KnowledgeExtension", "Page", "Query", "SearchResult",
        "Snippet", "VectorState", "WordLlamaEmbedder", "embedder_from_settings",
        "read_versions", "vector_support"]
    for name in ator.knowledge.__all__:
        assert hasattr(ator.knowledge, name), name
