"""Embedding models behind one small interface (layer: knowledge; imports net, errors,
settings, numpy and wordllama lazily).

- `WordLlamaEmbedder` (the default): wordllama's l2_supercat static model, 256 dimensions,
  whose weights and tokenizer ship inside the `wordllama` wheel. It is loaded from the
  installed package with downloads disabled (wordllama's own default path for the tokenizer
  misses the file its wheel ships, so the package directory is given as its cache), in a
  worker thread, on first use.
- `EndpointEmbedder`: an OpenAI-compatible `POST {base_url}/embeddings`, asked for 256
  `dimensions`, through the egress guard like every outbound call.
- `HashingEmbedder`: a deterministic bag of hashed words, for tests of the plumbing.

Every embedder returns unit vectors of `DIMENSIONS` floats; `model` names what made them (the
cache and the vectors are keyed by it, so changing the model never mixes two spaces).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx

from ator.errors import AtorError
from ator.net import Egress
from ator.store.knowledge import DIMENSIONS

__all__ = ["Embedder", "EmbeddingFailed", "EndpointEmbedder", "HashingEmbedder",
           "WordLlamaEmbedder", "vector_text"]

_BATCH = 256


class EmbeddingFailed(AtorError):
    def __init__(self, message: str) -> None:
        super().__init__(message, kind="provider", code="embedding_failed", status=502,
                         retryable=True)


class Embedder(Protocol):
    model: str

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector of DIMENSIONS floats per text. Raises EmbeddingFailed."""
        ...

    async def aclose(self) -> None: ...


def vector_text(vector: Sequence[float]) -> str:
    """pgvector's text form."""
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


def _unit(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else [0.0] * len(vector)


class WordLlamaEmbedder:
    model = "wordllama/l2_supercat_256"

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = asyncio.Lock()

    def _load(self) -> Any:
        import wordllama

        return wordllama.WordLlama.load(config="l2_supercat", dim=DIMENSIONS,
                                        cache_dir=Path(wordllama.__file__).parent,
                                        disable_download=True)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        async with self._lock:
            if self._model is None:
                self._model = await asyncio.to_thread(self._load)
        model = self._model
        found = await asyncio.to_thread(lambda: model.embed(list(texts), norm=True))
        return [_unit(row) for row in found.tolist()]

    async def aclose(self) -> None:
        self._model = None


class EndpointEmbedder:
    """An OpenAI-compatible embeddings endpoint, reached through the egress guard."""

    def __init__(self, egress: Egress, *, base_url: str, model: str, api_key: str | None,
                 timeout: float = 60.0) -> None:
        self.model = f"endpoint/{model}"
        self._name = model
        self._url = base_url.rstrip("/") + "/embeddings"
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = egress.httpx_client(timeout=timeout, headers=headers,
                                           secret_headers=("authorization",))

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), _BATCH):
            out.extend(await self._batch(list(texts[start:start + _BATCH])))
        return out

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        try:
            answer = await self._client.post(self._url, json={
                "model": self._name, "input": texts, "dimensions": DIMENSIONS,
                "encoding_format": "float"})
        except httpx.HTTPError as exc:
            raise EmbeddingFailed(f"the embeddings endpoint failed: {type(exc).__name__}") \
                from None
        except AtorError as exc:  # the egress guard refused it
            raise EmbeddingFailed(f"the embeddings endpoint was refused: {exc.message}") \
                from None
        if answer.status_code != 200:
            raise EmbeddingFailed(f"the embeddings endpoint answered {answer.status_code}")
        try:
            data = sorted(answer.json()["data"], key=lambda d: int(d["index"]))
            vectors = [[float(x) for x in d["embedding"]] for d in data]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingFailed(f"the embeddings endpoint's answer is not valid: {exc}") \
                from None
        if len(vectors) != len(texts) or any(len(v) != DIMENSIONS for v in vectors):
            raise EmbeddingFailed(f"the embeddings endpoint must return one {DIMENSIONS}-"
                                  "dimension vector per input")
        return [_unit(v) for v in vectors]

    async def aclose(self) -> None:
        await self._client.aclose()


class HashingEmbedder:
    """Words hashed into DIMENSIONS buckets: equal texts embed equally, nothing more."""

    model = "hashing"

    def __init__(self) -> None:
        self.calls = 0
        self.texts = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        self.texts += len(texts)
        out = []
        for text in texts:
            vector = [0.0] * DIMENSIONS
            for word in re.findall(r"\w+", text.lower()):
                vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIMENSIONS] += 1
            out.append(_unit(vector))
        return out

    async def aclose(self) -> None:
        return None
