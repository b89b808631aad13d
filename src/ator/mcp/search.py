"""Tool search: BM25 over a catalog's names, descriptions and parameter names (layer: mcp;
imports bm25s, tools.base).

Above a catalog-size threshold a turn does not mount every MCP tool: it mounts
`tool_search(query)`, and the tools a search finds become callable from the next model call
on, for the rest of the turn (the toolset is asked again before every call). Ranking is
`bm25s` (a maintained BM25 library), not a hand-rolled scorer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import bm25s

from ator.tools.base import Tool, ToolContext

__all__ = ["ToolIndex", "search_tool"]

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _words(text: str) -> str:
    return _CAMEL.sub(" ", text).replace("_", " ").replace("-", " ").replace(".", " ")


def _document(tool: Tool) -> str:
    props = tool.input_schema.get("properties") if isinstance(tool.input_schema, dict) else None
    params = " ".join(props) if isinstance(props, dict) else ""
    # The name counts twice: it is the most specific thing a tool says about itself.
    return " ".join([_words(tool.name), _words(tool.name), tool.description, _words(params)])


class ToolIndex:
    """A BM25 index over some tools, built once per catalog."""

    def __init__(self, tools: Sequence[Tool]) -> None:
        self.tools = list(tools)
        self._retriever: Any = None
        if self.tools:
            tokens = bm25s.tokenize([_document(t) for t in self.tools], stopwords="en",
                                    show_progress=False)
            self._retriever = bm25s.BM25()
            self._retriever.index(tokens, show_progress=False)

    def search(self, query: str, k: int = 5) -> list[Tool]:
        if self._retriever is None or not query.strip():
            return []
        tokens = bm25s.tokenize([_words(query)], stopwords="en", show_progress=False)
        if not tokens.vocab:
            return []
        found, scores = self._retriever.retrieve(tokens, k=min(k, len(self.tools)),
                                                 show_progress=False)
        return [self.tools[int(i)] for i, s in zip(found[0], scores[0], strict=True)
                if float(s) > 0]


def search_tool(activate: Callable[[ToolContext, str, int], list[Tool]]) -> Tool:
    """The `tool_search` tool; `activate(ctx, query, k)` finds tools and makes them callable
    for the rest of the caller's turn."""

    async def handler(args: dict[str, Any], ctx: ToolContext) -> str:
        found = activate(ctx, str(args["query"]), int(args.get("limit", 5)))
        if not found:
            return "No tool matches that query. Try other words (what the tool acts on)."
        lines = [f"- {t.name}: {t.description[:200]}" for t in found]
        return ("These tools are now callable (from your next step on):\n" + "\n".join(lines))

    return Tool(
        name="tool_search",
        description="Search the catalog of available tools by what you need to do; the "
                    "matching tools become callable from your next step on. Most tools are "
                    "not listed until found this way.",
        input_schema={"type": "object", "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 500},
            "limit": {"type": "integer", "minimum": 1, "maximum": 20}},
            "required": ["query"], "additionalProperties": False},
        handler=handler, read_only=True,
    )
