"""The provider protocol and its normalized stream events (layer: providers; imports errors only).

Every adapter turns its API's stream into the same small vocabulary of events, so the agent
loop never sees a vendor type. Messages use one provider-neutral shape, close to the
Anthropic Messages content-block form because it is the richest:

    {"role": "user" | "assistant", "content": [block, ...]}
    block = {"type": "text", "text": str}
          | {"type": "thinking", "thinking": str, "signature": str | None}
          | {"type": "tool_use", "id": str, "name": str, "input": dict}
          | {"type": "tool_result", "tool_use_id": str, "content": str, "is_error": bool}

Adapters map this shape to their wire format (providers/openai.py flattens tool results into
`role: tool` messages, for example).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "STOP_REASONS",
    "Block",
    "Message",
    "MessageStop",
    "ModelRequest",
    "Provider",
    "StreamEvent",
    "SystemBlock",
    "TextDelta",
    "ThinkingDelta",
    "ToolInputDelta",
    "ToolSpec",
    "ToolUseStart",
    "ToolUseStop",
    "Usage",
]

Block = dict[str, Any]
Message = dict[str, Any]

StopReason = Literal[
    "end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn"
]
STOP_REASONS: frozenset[str] = frozenset(
    {"end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn"}
)


@dataclass(frozen=True, slots=True)
class SystemBlock:
    """One labelled layer of the system prompt. `cache` asks for a cache breakpoint after it."""

    text: str
    name: str = "system"
    cache: bool = False


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as a model sees it, plus where it came from (adapters send only the first
    three fields; `origin` and `read_only` are for the prompt, the inspector and retries)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    origin: str = "native"  # "native", "mcp:<server>", "subagents", …
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """What the loop asks of a model for one step."""

    model: str
    messages: list[Message]
    system: list[SystemBlock] = field(default_factory=list)
    tools: list[ToolSpec] = field(default_factory=list)
    max_tokens: int = 4096
    temperature: float | None = None
    # Stable per thread: providers that support it use it for abuse tracking / cache affinity.
    user_id: str | None = None
    # Ask the adapter to place prompt-cache breakpoints (system -> tools -> last user).
    cache: bool = True


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # False when the provider reported no usage at all: recorded as 0 and flagged, not guessed.
    reported: bool = True

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reported and other.reported,
        )


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    text: str = ""
    signature: str | None = None


@dataclass(frozen=True, slots=True)
class ToolUseStart:
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolInputDelta:
    id: str
    partial_json: str


@dataclass(frozen=True, slots=True)
class ToolUseStop:
    """The tool call is complete. `input` is the parsed arguments; `raw` the text it came from
    (kept so an unparseable payload can be reported to the model instead of becoming `{}`)."""

    id: str
    input: dict[str, Any] | None
    raw: str = ""

    @classmethod
    def from_json(cls, id: str, raw: str, *, empty: dict[str, Any] | None = None) -> ToolUseStop:
        """Parse streamed argument text. No text is `empty` (a tool without arguments);
        text that is not a JSON object gives `input=None`, never a silent `{}`."""
        if not raw.strip():
            return cls(id, dict(empty or {}), raw)
        try:
            value = json.loads(raw)
        except ValueError:
            return cls(id, None, raw)
        return cls(id, value if isinstance(value, dict) else None, raw)


@dataclass(frozen=True, slots=True)
class MessageStop:
    stop_reason: str
    usage: Usage
    model: str | None = None


StreamEvent = TextDelta | ThinkingDelta | ToolUseStart | ToolInputDelta | ToolUseStop | MessageStop


@runtime_checkable
class Provider(Protocol):
    """A model API. `stream` yields normalized events and ends with exactly one MessageStop.

    Raises ProviderError (with a typed `kind` and `retryable`) for failures; the loop owns
    retries, so adapters must not retry on their own (set the SDK's max_retries to 0).
    Cancellation propagates: an adapter closes its HTTP stream when the task is cancelled.
    """

    name: str

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]: ...
