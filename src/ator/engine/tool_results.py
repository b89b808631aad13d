"""Tool results too long for one read, stored whole, and the tool that pages through them
(layer: engine; imports store.mcp_servers, tools.base, errors).

A cut result names its id and page count; `read_tool_result(id, page)` reads one page of it,
for the org and thread that stored it.
"""

from __future__ import annotations

import math
from typing import Any
from uuid import UUID

from ator.errors import ToolError
from ator.store import mcp_servers as server_store
from ator.store.database import Database
from ator.store.scope import Scope
from ator.tools.base import Tool, ToolContext

__all__ = ["StoredResults", "read_tool_result"]


class StoredResults:
    """Tool results too long for one read, stored whole per org and thread."""

    def __init__(self, db: Database, page_chars: int) -> None:
        self.db = db
        self.page_chars = page_chars

    async def stash(self, ctx: ToolContext, text: str) -> str:
        rid = await server_store.save_result(self.db, Scope(ctx.org_id), ctx.thread_id, text)
        return str(rid)

    async def page(self, org_id: UUID, result_id: str, page: int) -> tuple[str, int]:
        try:
            rid = UUID(result_id)
        except ValueError:
            raise ToolError(f"{result_id!r} is not a stored result id") from None
        text = await server_store.read_result(self.db, Scope(org_id), rid)
        pages = max(1, math.ceil(len(text) / self.page_chars))
        if not 1 <= page <= pages:
            raise ToolError(f"page {page} does not exist; pages are 1..{pages}")
        start = (page - 1) * self.page_chars
        return text[start:start + self.page_chars], pages


async def _read_tool_result(args: dict[str, Any], ctx: ToolContext) -> str:
    results = ctx.service(StoredResults)
    page = int(args.get("page", 1))
    text, pages = await results.page(ctx.org_id, str(args["id"]), page)
    more = f" Next: read_tool_result(id=\"{args['id']}\", page={page + 1})." \
        if page < pages else " This is the last page."
    return f"[stored result {args['id']}: page {page} of {pages}.{more}]\n{text}"


read_tool_result = Tool(
    name="read_tool_result",
    description="Read one page of a tool result that was too long to show at once "
                "(the cut result names its id and the page count).",
    input_schema={"type": "object", "properties": {
        "id": {"type": "string"}, "page": {"type": "integer", "minimum": 1}},
        "required": ["id"], "additionalProperties": False},
    handler=_read_tool_result, read_only=True,
)
