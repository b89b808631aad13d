"""Speech engines: text in, audio bytes out as they are made (layer: voice; imports httpx,
ator.errors, ator.net, ator.obs, ator.settings).

`OpenAISpeech` calls an OpenAI-compatible `POST {base}/audio/speech` (OpenAI, and the local
servers that copy its API) through the egress guard, streaming the WAV it answers.
`LocalSpeech` runs Debian's `espeak-ng` (no network, no model download): the text on its
stdin, WAV on its stdout, read in chunks as it speaks. Being written while it is spoken, that
WAV carries the streaming placeholder sizes in its header (0x7ffff000), which players and
`sox` read as "until the end of the file". The process is killed, with its group, when the
caller stops reading.

This is the one subprocess outside the CLI runtimes and stdio MCP: a fixed binary the
operator installed, an argument list with no tenant text in it (the text goes to stdin).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from typing import Protocol

import httpx

from ator.errors import AtorError
from ator.net import Egress
from ator.obs.logging import get_logger
from ator.settings import Settings

__all__ = ["LocalSpeech", "OpenAISpeech", "SpeechEngine", "SpeechFailed", "engine_for"]

log = get_logger("ator.voice")
_CHUNK = 16 * 1024


class SpeechFailed(AtorError):
    kind = "speech_failed"
    code = "speech_failed"
    status = 502


class SpeechEngine(Protocol):
    name: str
    media_type: str

    def stream(self, text: str) -> AsyncIterator[bytes]:
        """The audio of `text`, chunk by chunk. Raises SpeechFailed before the first chunk
        when the engine cannot speak."""
        ...

    async def aclose(self) -> None: ...


class LocalSpeech:
    name = "espeak-ng"
    media_type = "audio/wav"

    def __init__(self, binary: str = "espeak-ng", voice: str = "en") -> None:
        self.binary = binary
        self.voice = voice

    async def stream(self, text: str) -> AsyncIterator[bytes]:
        try:
            proc = await asyncio.create_subprocess_exec(
                self.binary, "--stdout", "-v", self.voice, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True, env={"PATH": os.environ.get("PATH", "/usr/bin")})
        except FileNotFoundError:
            raise SpeechFailed(f"the local speech engine {self.binary!r} is not installed "
                               "(Debian: apt-get install espeak-ng)") from None
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(text.encode())
            await proc.stdin.drain()
            proc.stdin.close()
            while chunk := await proc.stdout.read(_CHUNK):
                yield chunk
            if await proc.wait() != 0:
                raise SpeechFailed(f"{self.binary} exited with status {proc.returncode}")
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()

    async def aclose(self) -> None:
        return None


class OpenAISpeech:
    name = "openai"
    media_type = "audio/wav"

    def __init__(self, egress: Egress, base_url: str, *, model: str, voice: str,
                 api_key: str | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        # The operator configured this endpoint: it may be on a private network.
        self.client = egress.for_endpoint(base_url).httpx_client(
            base_url=base_url.rstrip("/") + "/", headers=headers, timeout=120.0,
            secret_headers=("authorization",), transport=transport)
        self.model = model
        self.voice = voice

    async def stream(self, text: str) -> AsyncIterator[bytes]:
        body = {"model": self.model, "input": text, "voice": self.voice,
                "response_format": "wav"}
        try:
            async with self.client.stream("POST", "audio/speech", json=body) as response:
                if response.status_code != 200:
                    raise SpeechFailed(f"the speech API answered {response.status_code}")
                async for chunk in response.aiter_bytes(_CHUNK):
                    yield chunk
        except httpx.HTTPError as exc:
            raise SpeechFailed(f"the speech API failed: {type(exc).__name__}") from None

    async def aclose(self) -> None:
        await self.client.aclose()


def engine_for(settings: Settings, egress: Egress | None = None) -> SpeechEngine:
    """The speech API when the operator configured one, else the local engine."""
    if settings.speech_url:
        key = settings.speech_api_key.get_secret_value() if settings.speech_api_key else None
        return OpenAISpeech(egress or Egress.from_settings(settings), settings.speech_url,
                            model=settings.speech_model, voice=settings.speech_voice,
                            api_key=key)
    return LocalSpeech(settings.speech_local_binary, settings.speech_local_voice)
