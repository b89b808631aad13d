"""What a model call consumed, and the one tokens-from-size constant (layer: bottom; imports
nothing of ator).

`Usage` is a value every layer passes around (providers report it, the loop sums it, cost/
prices it, the store records it), so it lives at the bottom. `CHARS_PER_TOKEN` is the single
estimate ator uses wherever it must guess tokens from size: output streamed by a call cut
short, the input of a request before it is sent (budget reservations, compaction).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CHARS_PER_TOKEN", "Usage", "estimate_tokens"]


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # False when the provider reported no usage at all: recorded as 0 and flagged, not guessed.
    reported: bool = True
    # True when some figure is an estimate (streamed characters / CHARS_PER_TOKEN) because the
    # call was cut short before the provider reported it. Only a cut-short call is estimated.
    estimated: bool = False

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
            self.estimated or other.estimated,
        )



CHARS_PER_TOKEN: int = 4


def estimate_tokens(chars: int) -> int:
    """Tokens for `chars` characters of text, rounded up (0 for no text)."""
    return -(-chars // CHARS_PER_TOKEN) if chars > 0 else 0
