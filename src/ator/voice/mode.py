"""A thread's voice mode as a turn's own state (layer: voice; imports agent.extension,
agent.system_prompt): read by the turn's start statement, it adds the voice layer to the
prompt (how to write a reply that is spoken)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ator.agent.extension import TurnField
from ator.agent.system_prompt import Layer

__all__ = ["VOICE_PROMPT", "VOICE_VERSION", "VoiceMode"]

VOICE_PROMPT = (
    "This conversation is spoken: your reply is read aloud to the user. Answer in short, "
    "plain spoken sentences, one idea at a time. No markdown, lists, tables, code blocks, "
    "links or emoji; say numbers and symbols as words would be said; if a detail needs the "
    "screen, say so briefly instead of reading it out."
)
#: Bump when VOICE_PROMPT changes.
VOICE_VERSION = 1
_LAYER = Layer("voice", VOICE_PROMPT, VOICE_VERSION)


@dataclass(frozen=True, slots=True)
class VoiceMode:
    """The thread is in voice mode (a turn carries this only then)."""

    @staticmethod
    def build(value: Any) -> VoiceMode | None:
        return VoiceMode() if value else None

    def prompt_layer(self) -> Layer:
        return _LAYER

    @staticmethod
    def field() -> TurnField:
        return TurnField("voice", "t.voice", VoiceMode.build)
