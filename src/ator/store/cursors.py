"""Keyset cursors over `(created_at, id)`: one encoding for every list paged that way (layer:
store; imports ator.errors).

A list read a page at a time orders its rows by `(created_at, id)` (newest or oldest first),
fetches `limit + 1` rows after the last one seen, and hands the caller an opaque cursor for
the next page. The cursor is that last row's key, `"<created_at ISO 8601>|<id>"` in
URL-safe base64 without padding (a padded one is read too); anything else is refused as
422 `invalid_cursor`, never read as some other position.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Protocol, TypeVar
from uuid import UUID

from ator.errors import ValidationFailed

__all__ = ["Keyed", "decode", "encode", "limit_of", "page_of"]


class Keyed(Protocol):
    @property
    def created_at(self) -> datetime: ...

    @property
    def id(self) -> UUID: ...


K = TypeVar("K", bound=Keyed)


def encode(row: Keyed) -> str:
    """The cursor that continues after `row`."""
    raw = f"{row.created_at.isoformat()}|{row.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str) -> tuple[datetime, UUID]:
    """The `(created_at, id)` a cursor names; ValidationFailed (`invalid_cursor`) for a
    string `encode` did not make."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        when, _, row_id = raw.partition("|")
        created_at = datetime.fromisoformat(when)
        if created_at.tzinfo is None:
            raise ValueError("naive time")
        return created_at, UUID(row_id)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise ValidationFailed("cursor: not a cursor of this list",
                               code="invalid_cursor") from None


def limit_of(limit: int, most: int) -> int:
    """A page size between 1 and `most`."""
    return max(1, min(limit, most))


def page_of(items: list[K], limit: int) -> tuple[list[K], str | None]:
    """The page out of the `limit + 1` items read, and the cursor of the next page (None:
    this is the last one)."""
    page = items[:limit]
    return page, encode(page[-1]) if len(items) > limit and page else None
