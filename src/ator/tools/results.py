"""The character budget of one tool result, and the stored results that page through it
(layer: tools; imports tools.base, store.mcp_servers, store.database, errors).

One place decides what the model reads of a result: `ResultBudget`, built from the turn's
`tool_result_chars` cap by the registry, the only cutter. A result within the budget goes as
it is. A longer one is stored whole when the turn mounts `read_tool_result` (and grants
`StoredResults`); the model then reads page 1 and a pointer to the next, and every page is
its header plus its content, all within the budget, so neither a marker, the pointer nor a
header is ever cut and the pages joined are exactly the stored text. Otherwise the result is
cut with a marker that fits inside the budget and says how much was kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ator.errors import ToolError
from ator.store import mcp_servers as server_store
from ator.store.database import Database
from ator.store.scope import Scope
from ator.tools.base import Tool, ToolContext

__all__ = ["READER", "ResultBudget", "StoredResults", "read_tool_result"]

READER = "read_tool_result"

# The widest header or pointer a page can carry: stored ids are UUIDs (36 characters) and
# no count has more than 12 digits. Pages are this much smaller than the budget.
_WIDEST_ID = "0" * 36
_WIDEST_N = 10**12 - 1


def _header(ref: str, page: int, pages: int) -> str:
    more = (f' Next: read_tool_result(id="{ref}", page={page + 1}).' if page < pages
            else " This is the last page.")
    return f"[stored result {ref}: page {page} of {pages}.{more}]\n"


def _pointer(ref: str, kept: int, total: int, pages: int) -> str:
    return (f"\n[result cut: showing {kept} of {total} characters; the whole result is "
            f'stored. Call read_tool_result(id="{ref}", page=2) for the next page '
            f"(pages 1..{pages})]")


def _marker(kept: int, total: int) -> str:
    return f"\n[truncated: showing {kept} of {total} characters]"


_RESERVE = max(len(_header(_WIDEST_ID, _WIDEST_N - 1, _WIDEST_N)),
               len(_pointer(_WIDEST_ID, _WIDEST_N, _WIDEST_N, _WIDEST_N)))


@dataclass(frozen=True, slots=True)
class ResultBudget:
    """What the model may read of one tool result: `limit` characters, everything included."""

    limit: int

    @property
    def page_chars(self) -> int:
        """A page's content under this budget; 0 when the budget is too small to page (a
        page must hold at least as much as its header)."""
        room = self.limit - _RESERVE
        return room if room >= _RESERVE else 0

    def fits(self, text: str) -> bool:
        return len(text) <= self.limit

    def pages(self, total: int) -> int:
        return max(1, math.ceil(total / self.page_chars))

    def cut(self, text: str) -> str:
        """`text` cut to the budget with a marker saying how much was kept."""
        if self.fits(text):
            return text
        total = len(text)
        kept = self.limit
        for _ in range(3):  # the marker names `kept`: settle its digits (at most twice)
            kept = max(0, self.limit - len(_marker(kept, total)))
        if kept + len(_marker(kept, total)) > self.limit:  # smaller than any marker
            return text[: self.limit]
        return text[:kept] + _marker(kept, total)

    def first_page(self, text: str, ref: str) -> str:
        """Page 1 of a stored result with the pointer to page 2 (needs `page_chars`)."""
        page = text[: self.page_chars]
        return page + _pointer(ref, len(page), len(text), self.pages(len(text)))

    def page(self, text: str, ref: str, page: int) -> str:
        """Page `page` of a stored result with its header; ToolError for a page outside."""
        if not self.page_chars:
            raise ToolError(f"the tool result cap ({self.limit} characters) is too small "
                            "to page a stored result", code="invalid_argument")
        pages = self.pages(len(text))
        if not 1 <= page <= pages:
            raise ToolError(f"page {page} does not exist; pages are 1..{pages}",
                            code="invalid_argument")
        start = (page - 1) * self.page_chars
        return _header(ref, page, pages) + text[start:start + self.page_chars]


class StoredResults:
    """Tool results too long for one read, stored whole per org and thread."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def stash(self, ctx: ToolContext, text: str) -> str:
        thread_id, _ = ctx.in_turn()
        rid = await server_store.save_result(self.db, Scope(ctx.org_id), thread_id, text)
        return str(rid)

    async def read(self, org_id: UUID, result_id: str) -> tuple[str, str]:
        """(the canonical id, the stored text); ToolError for a malformed id, NotFound for
        one this org does not have."""
        try:
            rid = UUID(result_id)
        except ValueError:
            raise ToolError(f"{result_id!r} is not a stored result id",
                            code="invalid_argument") from None
        return str(rid), await server_store.read_result(self.db, Scope(org_id), rid)


async def _read_tool_result(args: dict[str, Any], ctx: ToolContext) -> str:
    ref, text = await ctx.service(StoredResults).read(ctx.org_id, str(args["id"]))
    return ResultBudget(ctx.result_chars).page(text, ref, int(args.get("page", 1)))


read_tool_result = Tool(
    name=READER,
    description="Read one page of a tool result that was too long to show at once "
                "(the cut result names its id and the page count).",
    input_schema={"type": "object", "properties": {
        "id": {"type": "string"}, "page": {"type": "integer", "minimum": 1}},
        "required": ["id"], "additionalProperties": False},
    # What it pages came from a tool, often from outside: read back as data, like the result.
    handler=_read_tool_result, read_only=True, untrusted=True,
)
