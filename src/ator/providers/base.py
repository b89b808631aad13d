"""The provider protocol and its normalized stream events (layer: providers; imports errors only).

Every adapter turns its API's stream into the same small vocabulary of events, so the agent
loop never sees a vendor type. Messages use one provider-neutral shape, close to the
Anthropic Messages content-block form because it is the richest:

    {"role": "user" | "assistant", "content": [block, ...]}
    block = {"type": "text", "text": str}
          | {"type": "thinking", "thinking": str, "signature": str | None}
          | {"type": "tool_use", "id": str, "name": str, "input": dict}
          | {"type": "tool_result", "tool_use_id": str, "content": str, "is_error": bool}
          | {"type": "native_tool_call", "id": str, "name": str, "input": dict}
          | {"type": "native_tool_result", "tool_use_id": str, "content": str,
             "is_error": bool}

Adapters map this shape to their wire format (providers/openai.py flattens tool results into
`role: tool` messages, for example).

A tool the provider ran itself (a server-side search, a CLI runtime's own shell) streams as
`NativeToolCall` and `NativeToolResult`: the loop keeps them in the reply as `native_tool_*`
blocks (persisted with it and shown), never runs them and never answers them with a
`tool_result`; adapters do not send them back (`NATIVE_BLOCKS`).

`MessageStop` may carry what the provider says the call cost (`cost_usd`, a CLI runtime's own
figure): it is billed instead of the catalog price and flagged `cost_source: "provider"`. It
may also carry `session`, opaque state the provider wants back on the thread's next call
(a CLI session id to resume): the engine stores it per (thread, provider) and hands it over
in `ModelRequest.session` - only for providers whose factory says `sessions=True`.

Two events carry no content, and exist for the loop's caps:

- `UsageUpdate` - what the call has consumed so far, as the provider reports it mid-stream
  (cumulative: the latest one replaces the earlier ones). Anthropic reports input and cache
  tokens at `message_start` and cumulative output in `message_delta`; OpenAI-compatible servers
  report nothing before the end, so their adapter sends an estimate flagged `estimated=True`.
- `Keepalive` - the provider sent an event with nothing in it for us (Anthropic `ping`, an empty
  block start/stop, an OpenAI chunk with an empty delta). Every raw provider event yields at
  least one normalized event, so any sign of life resets the loop's stall watchdog.

A call cut short (stop, turn timeout, stall) is billed with `UsageMeter`: feed it every event the
loop saw, and `usage()` is the last reported figure, with output raised to the estimate of the
streamed text (chars / 4, flagged `estimated`) when the provider had not reported that much.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, Protocol, runtime_checkable

from ator.usage import CHARS_PER_TOKEN, Usage, estimate_tokens

__all__ = [
    "CHARS_PER_TOKEN",
    "KEEPALIVE",
    "NATIVE_BLOCKS",
    "STOP_REASONS",
    "Block",
    "Keepalive",
    "Message",
    "MessageStop",
    "ModelRequest",
    "NativeToolCall",
    "NativeToolResult",
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
    "UsageMeter",
    "UsageUpdate",
    "estimate_tokens",
    "partial_usage",
]

Block = dict[str, Any]
Message = dict[str, Any]

StopReason = Literal[
    "end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn"
]
STOP_REASONS: frozenset[str] = frozenset(
    {"end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn"}
)
#: Block types of tools the provider ran itself: kept and shown, never sent to a model.
NATIVE_BLOCKS: frozenset[str] = frozenset({"native_tool_call", "native_tool_result"})


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
    on_demand: bool = False  # mounted by a search during the turn (the inspector shows it)


@dataclass(frozen=True, slots=True, weakref_slot=True)
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
    # Ask the adapter to place prompt-cache breakpoints (providers/breakpoints.py).
    cache: bool = True
    # What this provider returned as `MessageStop.session` on the thread's latest call that
    # had one (None: none yet, or the provider keeps no sessions).
    session: Mapping[str, Any] | None = None
    # Whose call this is (a CLI runtime's workspace is the org's, or its thread tree's):
    # the org's id and the id of the thread tree's root, as text.
    org_id: str | None = None
    thread_tree: str | None = None


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
class NativeToolCall:
    """A tool call the provider executed itself (complete: arguments parsed)."""

    id: str
    name: str
    input: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NativeToolResult:
    """The result of a `NativeToolCall` (`id` is the call's)."""

    id: str
    content: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class MessageStop:
    stop_reason: str
    usage: Usage
    model: str | None = None
    # What the provider says this call cost, in USD (None: price it from the catalog).
    cost_usd: Decimal | None = None
    # Opaque state to hand back on the thread's next call (None: keep what is stored).
    session: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class UsageUpdate:
    """Usage the provider reported mid-stream, cumulative for this call (latest wins).
    `cost_usd` is what the provider says the call cost so far (a CLI runtime ending in an
    error reports it), `model` the model it names: a call cut short is billed with them."""

    usage: Usage
    cost_usd: Decimal | None = None
    model: str | None = None


@dataclass(frozen=True, slots=True)
class Keepalive:
    """A provider event without content: proof of life for the stall watchdog, nothing else.
    Adapters yield the shared `KEEPALIVE` instance, so one costs no allocation."""


KEEPALIVE: Keepalive = Keepalive()

StreamEvent = (
    TextDelta
    | ThinkingDelta
    | ToolUseStart
    | ToolInputDelta
    | ToolUseStop
    | NativeToolCall
    | NativeToolResult
    | MessageStop
    | UsageUpdate
    | Keepalive
)

#: The rule of thumb for text a provider has not counted: about four characters per token.
class UsageMeter:
    """What one model call has consumed so far, folded from its events in O(1) per event.

    `usage()` is the figure to bill: the MessageStop's usage once the call finished; before
    that (a call cut short) the last UsageUpdate, with `output_tokens` raised to the estimate of
    the text, thinking and tool input streamed so far when that is higher - flagged `estimated`.
    With no UsageUpdate at all, the estimate alone, flagged `reported=False, estimated=True`.
    Nothing streamed and nothing reported is `Usage(reported=False)`: 0, and it says so.
    """

    __slots__ = ("_chars", "_final", "_reported", "cost_usd", "model")

    def __init__(self) -> None:
        self._reported: Usage | None = None
        self._final: Usage | None = None
        self._chars = 0
        # What the provider said the call cost and which model it named (latest wins).
        self.cost_usd: Decimal | None = None
        self.model: str | None = None

    def observe(self, event: StreamEvent) -> None:
        if isinstance(event, TextDelta | ThinkingDelta):
            self._chars += len(event.text)
        elif isinstance(event, ToolInputDelta):
            self._chars += len(event.partial_json)
        elif isinstance(event, ToolUseStart):
            self._chars += len(event.name)
        elif isinstance(event, UsageUpdate | MessageStop):
            if isinstance(event, UsageUpdate):
                self._reported = event.usage
            else:
                self._final = event.usage
            self.cost_usd = event.cost_usd if event.cost_usd is not None else self.cost_usd
            self.model = event.model or self.model

    @property
    def finished(self) -> bool:
        """True once the MessageStop was seen: `usage()` is then the provider's final figure."""
        return self._final is not None

    def usage(self) -> Usage:
        if self._final is not None:
            return self._final
        streamed = estimate_tokens(self._chars)
        reported = self._reported
        if reported is None:
            if streamed == 0:
                return Usage(reported=False)
            return Usage(output_tokens=streamed, reported=False, estimated=True)
        if streamed <= reported.output_tokens:
            return reported
        return Usage(
            input_tokens=reported.input_tokens,
            output_tokens=streamed,
            cache_read_tokens=reported.cache_read_tokens,
            cache_write_tokens=reported.cache_write_tokens,
            reported=reported.reported,
            estimated=True,
        )


def partial_usage(events: Iterable[StreamEvent]) -> Usage:
    """`UsageMeter.usage()` after seeing `events`: what a call cut short has consumed."""
    meter = UsageMeter()
    for event in events:
        meter.observe(event)
    return meter.usage()


@runtime_checkable
class Provider(Protocol):
    """A model API. `stream` yields normalized events and ends with exactly one MessageStop.

    Raises ProviderError (with a typed `kind` and `retryable`) for failures; the loop owns
    retries, so adapters must not retry on their own (set the SDK's max_retries to 0).
    Cancellation propagates: an adapter closes its HTTP stream when the task is cancelled.
    """

    name: str

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]: ...
