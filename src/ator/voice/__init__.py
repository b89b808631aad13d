"""Voice (layer: voice — a service beside webhooks; imports agent.extension, net, store,
settings, errors, obs): a thread's voice mode (the voice prompt layer) and its replies
spoken by an OpenAI-compatible speech API or the local espeak-ng."""

from ator.voice.engines import LocalSpeech, OpenAISpeech, SpeechEngine, SpeechFailed, engine_for
from ator.voice.extension import VoiceExtension
from ator.voice.service import Speech, Voice

__all__ = ["LocalSpeech", "OpenAISpeech", "Speech", "SpeechEngine", "SpeechFailed", "Voice",
           "VoiceExtension", "engine_for"]
