"""The voice service: a thread's voice mode and its replies spoken (layer: voice; imports
ator.errors, ator.settings, ator.store, ator.voice.engines).

Reached as `ator.service(Voice)`. Voice mode puts the voice layer in every turn's prompt
(voice/mode.py; recorded by the inspector like any layer). `speak` returns the
media type and the audio of a reply as it is made: the turn's text (the latest reply by
default), cut to `speech_max_chars`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from uuid import UUID

from ator.errors import NotFound
from ator.settings import Settings
from ator.store import voice as store
from ator.store.database import Database
from ator.store.scope import Scope
from ator.voice.engines import SpeechEngine

__all__ = ["Speech", "Voice"]


@dataclass(frozen=True, slots=True)
class Speech:
    turn_id: UUID
    engine: str
    media_type: str
    chars: int
    audio: AsyncIterator[bytes]


class Voice:
    def __init__(self, db: Database, settings: Settings, engine: SpeechEngine) -> None:
        self.db = db
        self.max_chars = settings.speech_max_chars
        self.engine = engine

    async def set_mode(self, scope: Scope, thread_id: UUID, on: bool) -> None:
        """Voice mode on or off for the thread's next turns. Raises NotFound."""
        await store.set_voice(self.db, scope, thread_id, on)

    async def speak(self, scope: Scope, thread_id: UUID, turn_id: UUID | None = None
                    ) -> Speech:
        """A reply of the thread, spoken. Raises NotFound (no such thread, or no reply to
        speak: `no_reply`)."""
        found, text = await store.reply_text(self.db, scope, thread_id, turn_id)
        if found is None or not text.strip():
            raise NotFound("this thread has no reply to speak", code="no_reply")
        text = text[:self.max_chars]
        return Speech(found, self.engine.name, self.engine.media_type, len(text),
                      self.engine.stream(text))
