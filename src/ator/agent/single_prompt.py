"""The context manager for runtimes that take one prompt (layer: agent; imports agent.hooks,
agent.state, providers.base, usage).

An agent CLI takes one prompt, not a conversation; so does any setup that asks for it
(`config.single_prompt`). Before each call the request is packed into one prompt:

- the **head** always survives: the prompt layers (core identity, org policy, persona, the
  thread's instructions) and the task (the user messages since the last reply);
- then **sections** by priority - canonical facts, the thread's recent conversation, the
  compacted earlier part, knowledge hits, memory, background (`PRIORITY`; extensions add
  theirs through `SectionSource`) - each added whole while the prompt stays within half
  the model's window; a section that does not fit is skipped whole, never cut mid-way,
  and the ones after it are still tried in order;
- a resumed runtime session (`request.session`) already holds the conversation: those
  sections are left out, saying so.

The result lists its sources. It is recorded by the inspector like the layers are: each
part of the prompt is a layer of the call's record (name, hash, size, source), and
`single_prompt` says what was skipped and why, and the budget.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ator.agent.hooks import LoopHook
from ator.agent.state import TurnContext, TurnState
from ator.providers.base import Message, ModelRequest, SystemBlock
from ator.usage import estimate_tokens

__all__ = ["PRIORITY", "Packed", "Section", "SectionSource", "SinglePromptHook", "pack"]

#: Section kinds by priority (lower first). Unknown kinds go after background.
PRIORITY: Mapping[str, int] = {"facts": 10, "recent": 20, "earlier": 30, "knowledge": 40,
                               "memory": 50, "background": 60}
RECENT_MESSAGES = 8  # the conversation's tail counted as "recent"; the rest is "earlier"
_CONVERSATION = frozenset({"recent", "earlier"})


@dataclass(frozen=True, slots=True)
class Section:
    kind: str  # a PRIORITY key, or an extension's own
    text: str
    source: str  # where it came from (shown in the record)
    priority: int | None = None  # None: PRIORITY[kind]

    @property
    def rank(self) -> int:
        return self.priority if self.priority is not None else PRIORITY.get(self.kind, 100)

    @property
    def labelled(self) -> str:
        return f"## {self.kind}\n{self.text}"


@dataclass(frozen=True, slots=True)
class Packed:
    head: list[tuple[str, str]]  # (name, text), always kept, in order
    included: list[Section]
    skipped: list[tuple[Section, str]]  # and why
    budget_tokens: int
    used_tokens: int
    task: str = ""

    @property
    def sources(self) -> list[str]:
        return [s.source for s in self.included]

    def blocks(self) -> list[SystemBlock]:
        out = [SystemBlock(f"## {name}\n{text}", name=name) for name, text in self.head]
        out += [SystemBlock(s.labelled, name=f"context:{s.kind}") for s in self.included]
        return out

    def layers(self) -> list[dict[str, object]]:
        """The parts as the inspector's layers (name, hash, size, and a section's source)."""
        out: list[dict[str, object]] = [_layer(n, f"## {n}\n{t}") for n, t in self.head]
        out += [{**_layer(f"context:{s.kind}", s.labelled), "source": s.source,
                 "priority": s.rank} for s in self.included]
        return out

    def record(self) -> dict[str, Any]:
        return {"budget_tokens": self.budget_tokens, "used_tokens": self.used_tokens,
                "sources": self.sources,
                "skipped": [{"kind": s.kind, "source": s.source, "reason": why,
                             "tokens": _tokens(s.labelled)} for s, why in self.skipped]}


def _tokens(text: str) -> int:
    return estimate_tokens(len(text))


def _layer(name: str, text: str) -> dict[str, object]:
    return {"name": name, "version": None, "hash": hashlib.sha256(text.encode()).hexdigest()[:16],
            "chars": len(text)}


def pack(head: Sequence[tuple[str, str]], sections: Sequence[Section], budget_tokens: int,
         *, task: str = "", leave_out: Mapping[str, str] | None = None) -> Packed:
    """Keep `head` and `task`, then add `sections` whole by priority within the budget.
    `leave_out` names kinds not to add at all (kind -> why)."""
    used = sum(_tokens(f"## {n}\n{t}") for n, t in head) + _tokens(task)
    included: list[Section] = []
    skipped: list[tuple[Section, str]] = []
    for section in sorted(sections, key=lambda s: s.rank):  # stable: given order breaks ties
        why = (leave_out or {}).get(section.kind)
        cost = _tokens(section.labelled)
        if why is None and used + cost > budget_tokens:
            why = f"does not fit: {cost} tokens, {max(budget_tokens - used, 0)} left"
        if why is not None:
            skipped.append((section, why))
            continue
        included.append(section)
        used += cost
    return Packed(list(head), included, skipped, budget_tokens, used, task)


class SectionSource(Protocol):
    """What an extension adds to a single prompt (knowledge hits, memory, facts ...)."""

    async def sections(self, turn: TurnContext, state: TurnState) -> Sequence[Section]: ...


@dataclass
class SinglePromptHook(LoopHook):
    """Packs every request of the turn into one prompt within half of `window_tokens`."""

    window_tokens: int
    sources: Sequence[SectionSource] = field(default_factory=tuple)

    async def before_call(self, turn: TurnContext, state: TurnState, request: ModelRequest
                          ) -> ModelRequest:
        head = [(b.name, _unlabelled(b)) for b in request.system if b.text.strip()]
        task_at = _task_start(request.messages)
        task = "\n\n".join(t for m in request.messages[task_at:] if (t := _text(m)))
        sections = _conversation(turn, request.messages[:task_at])
        for source in self.sources:
            sections.extend(await source.sections(turn, state))
        leave_out = ({k: "the runtime's resumed session holds it" for k in _CONVERSATION}
                     if request.session else None)
        packed = pack(head, sections, self.window_tokens // 2, task=task, leave_out=leave_out)
        state.request_meta["single_prompt"] = packed.record()
        state.request_meta["layers"] = packed.layers()
        messages: list[Message] = [{"role": "user", "content": [{"type": "text",
                                                                 "text": task}]}]
        return replace(request, system=packed.blocks(), messages=messages)


def _unlabelled(block: SystemBlock) -> str:
    prefix = f"## {block.name}\n"
    return block.text[len(prefix):] if block.text.startswith(prefix) else block.text


def _task_start(messages: Sequence[Message]) -> int:
    """Where the trailing user messages (the task) begin."""
    i = len(messages)
    while i > 0 and messages[i - 1].get("role") == "user" and not messages[i - 1].get("summary"):
        i -= 1
    return i


def _conversation(turn: TurnContext, before: Sequence[Message]) -> list[Section]:
    if not before:
        return []
    recent = list(before[-RECENT_MESSAGES:])
    earlier = list(before[:-RECENT_MESSAGES])
    out = []
    thread = f"thread:{turn.thread_id}"
    if earlier or (recent and recent[0].get("summary")):
        if recent and recent[0].get("summary"):
            earlier, recent = [*earlier, recent[0]], recent[1:]
        out.append(Section("earlier", _transcript(earlier), f"{thread}:earlier"))
    if recent:
        out.append(Section("recent", _transcript(recent), f"{thread}:recent"))
    return out


def _transcript(messages: Sequence[Message]) -> str:
    return "\n\n".join(f"[{m.get('role')}] {t}" for m in messages if (t := _text(m)))


def _text(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            parts.append(str(block["text"]))
        elif kind in ("tool_use", "native_tool_call"):
            parts.append(f"(ran the tool {block.get('name')})")
    return "\n".join(parts)
