"""Where prompt-cache breakpoints go (layer: providers; imports providers.base).

One rule, used by the adapter that sends breakpoints (Anthropic: at most 4 blocks with
`cache_control`) and by the loop, which records the plan with the call (the inspector).
By priority: the system prompt (its last block flagged `cache`, else its last block), the
last tool, the latest compaction summary (a user message marked `"summary": True`, placed by
compaction; adapters never send the marker), the latest user message, then earlier flagged
system blocks. The system prompt and the tools are the stable prefix; the summary keeps a
long conversation's compacted head cached while its tail moves; the latest user message lets
the next call of the turn read everything before it. One exception, measured in
bench/prompt_cache.py: when the previous user message ends more than LOOKBACK_BLOCKS blocks
before the latest one (a step that called many tools), the API's lookback cannot reach the
previous call's breakpoint, so the previous user message is marked again, in the summary's
place (its prefix contains the summary anyway).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ator.providers.base import Message

__all__ = ["MAX_BREAKPOINTS", "Breakpoint", "plan_breakpoints"]

#: The Anthropic API rejects a request with more blocks carrying cache_control than this.
MAX_BREAKPOINTS: Final = 4
#: How far back (in content blocks) the API looks from a breakpoint for a cached prefix.
LOOKBACK_BLOCKS: Final = 20


def _blocks(messages: Sequence[Message]) -> int:
    return sum(1 if isinstance(m.get("content"), str) else len(m.get("content") or [])
               for m in messages)


@dataclass(frozen=True, slots=True)
class Breakpoint:
    part: str  # "system", "tools", "summary", "previous_user" or "user"
    index: int  # the system block, tool or message it follows (a message: its last block)

    @property
    def label(self) -> str:
        return f"{self.part}:{self.index}"


def plan_breakpoints(
    system_flags: Sequence[bool], n_tools: int, messages: Sequence[Message],
    *, limit: int = MAX_BREAKPOINTS,
) -> list[Breakpoint]:
    """The breakpoints for a request with these system blocks (their `cache` flags), this
    many tools and these messages, best first, at most `limit`."""
    flagged = [i for i, flag in enumerate(system_flags) if flag]
    chosen: list[Breakpoint] = []
    if system_flags:
        chosen.append(Breakpoint("system", flagged[-1] if flagged else len(system_flags) - 1))
    if n_tools:
        chosen.append(Breakpoint("tools", n_tools - 1))
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    summaries = [i for i in users if messages[i].get("summary") is True]
    if len(users) >= 2 and _blocks(messages[users[-2] + 1:users[-1] + 1]) > LOOKBACK_BLOCKS:
        # The previous call's breakpoint is beyond the lookback of this one's (a step with
        # many tool calls): mark it again, or nothing of the conversation is read. Its
        # prefix holds any summary before it, so it takes the summary's place.
        chosen.append(Breakpoint("previous_user", users[-2]))
    elif summaries and summaries[-1] != users[-1]:
        chosen.append(Breakpoint("summary", summaries[-1]))
    if users:
        chosen.append(Breakpoint("user", users[-1]))
    chosen.extend(Breakpoint("system", i) for i in reversed(flagged[:-1]))
    return chosen[:limit]
