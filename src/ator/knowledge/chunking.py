"""How a document is cut into chunks (layer: knowledge; imports the stdlib only).

The rule, for `text/markdown` and `text/plain` alike except where it says markdown:

1. Line ends are normalized to `\\n`; the text is split into *blocks* at blank lines. A
   fenced code block (markdown, between ``` or ~~~ lines) is one block, blank lines and all.
2. A markdown heading line (`#` to `######`) ends the chunk being filled and names the
   *section* of the chunks after it: the path of the headings above it, `A > B`.
3. Blocks are packed, in order, into a chunk while it stays within `max_chars`; the block
   that would overflow starts the next chunk. A block longer than `max_chars` alone is cut at
   the last sentence end (`. `, `! `, `? `, a line end) before the limit, else at the last
   space, else at the limit itself.
4. No overlap between chunks; an empty document has no chunks.

What is indexed and embedded for a chunk is `title`, its section and its text, one per line
(`indexed_text`), so a chunk is found by its document's title too; its SHA-256 is the
embedding cache's key.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

__all__ = ["Piece", "chunk", "indexed_text", "sha256"]

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^(```|~~~)")
_SENTENCE_END = re.compile(r"[.!?]\s|\n")


@dataclass(frozen=True, slots=True)
class Piece:
    seq: int
    section: str
    text: str


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def indexed_text(title: str, section: str, text: str) -> str:
    return "\n".join(part for part in (title, section, text) if part)


def _blocks(text: str, markdown: bool) -> list[tuple[str, str | None]]:
    """(block, heading) pairs: a heading line is its own block with its `#` level."""
    out: list[tuple[str, str | None]] = []
    current: list[str] = []
    fenced = False

    def flush() -> None:
        if current and any(line.strip() for line in current):
            out.append(("\n".join(current).strip("\n"), None))
        current.clear()

    for line in text.split("\n"):
        if markdown and _FENCE.match(line.strip()):
            fenced = not fenced
            current.append(line)
            continue
        if fenced:
            current.append(line)
            continue
        heading = _HEADING.match(line) if markdown else None
        if heading:
            flush()
            out.append((heading.group(2), heading.group(1)))
        elif not line.strip():
            flush()
        else:
            current.append(line)
    flush()
    return out


def _cut(block: str, max_chars: int) -> list[str]:
    pieces = []
    while len(block) > max_chars:
        window = block[:max_chars]
        ends = [m.end() for m in _SENTENCE_END.finditer(window)]
        at = ends[-1] if ends and ends[-1] > max_chars // 4 else window.rfind(" ") + 1
        if at <= 0:
            at = max_chars
        pieces.append(block[:at].strip())
        block = block[at:].strip()
    if block:
        pieces.append(block)
    return [p for p in pieces if p]


def chunk(text: str, *, markdown: bool, max_chars: int) -> list[Piece]:
    """The document's chunks by the rule above."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    pieces: list[Piece] = []
    path: list[tuple[int, str]] = []
    filling: list[str] = []
    size = 0

    def section() -> str:
        return " > ".join(name for _, name in path)

    def flush() -> None:
        nonlocal size
        if filling:
            pieces.append(Piece(len(pieces), section(), "\n\n".join(filling)))
        filling.clear()
        size = 0

    for block, level in _blocks(text, markdown):
        if level is not None:
            flush()
            depth = len(level)
            path[:] = [(d, n) for d, n in path if d < depth] + [(depth, block)]
            continue
        for part in _cut(block, max_chars):
            extra = len(part) + (2 if filling else 0)
            if filling and size + extra > max_chars:
                flush()
                extra = len(part)
            filling.append(part)
            size += extra
    flush()
    return pieces
