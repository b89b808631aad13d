"""Test support shipped in the package (layer: testing; imports nothing from ator above it).

Wire-level fakes of the model APIs (Anthropic Messages, OpenAI Chat Completions, OpenAI
Responses): real HTTP servers on 127.0.0.1 that stream canned replies in
each vendor's exact protocol, so the real SDKs (and anything pointed at `fake.base_url`) can be
exercised without the network. Script a fake with `Reply`, `HttpError`, `StreamError`, `Cut`,
`Hang` and `Keepalives`; read back what it received from `fake.requests`.
"""

from ator.testing.anthropic_wire import AnthropicWireFake
from ator.testing.openai_wire import OpenAIWireFake
from ator.testing.responses_wire import ResponsesWireFake
from ator.testing.wire import (
    Cut,
    Hang,
    HttpError,
    Keepalives,
    RecordedRequest,
    Reply,
    ScriptItem,
    StreamError,
    ToolCall,
    WireFake,
    WireUsage,
)

__all__ = [
    "AnthropicWireFake",
    "Cut",
    "Hang",
    "HttpError",
    "Keepalives",
    "OpenAIWireFake",
    "RecordedRequest",
    "Reply",
    "ResponsesWireFake",
    "ScriptItem",
    "StreamError",
    "ToolCall",
    "WireFake",
    "WireUsage",
]
