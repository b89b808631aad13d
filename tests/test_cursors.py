"""The keyset cursor every `(created_at, id)`-paged list shares (store/cursors.py)."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from ator.errors import ValidationFailed
from ator.store import cursors


@dataclass(frozen=True)
class Row:
    created_at: datetime
    id: UUID


def _rows(n: int) -> list[Row]:
    start = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    return [Row(start + timedelta(seconds=i), uuid.uuid4()) for i in range(n)]


def test_a_cursor_names_the_last_row_of_a_page_and_is_read_back() -> None:
    rows = _rows(4)
    page, cursor = cursors.page_of(rows, 3)
    assert page == rows[:3] and cursor is not None and "=" not in cursor
    assert cursors.decode(cursor) == (rows[2].created_at, rows[2].id)
    assert cursors.page_of(rows[:3], 3) == (rows[:3], None)  # no more: the last page
    assert cursors.page_of([], 3) == ([], None)


def test_a_padded_cursor_is_read_and_anything_else_is_invalid_cursor() -> None:
    row = _rows(1)[0]
    padded = base64.urlsafe_b64encode(f"{row.created_at.isoformat()}|{row.id}".encode()).decode()
    assert cursors.decode(padded) == (row.created_at, row.id)
    naive = base64.urlsafe_b64encode(f"2026-12-02T12:00:00|{row.id}".encode()).decode()
    for bad in ("bm90LWEtY3Vyc29y", "%%%", "", naive):
        with pytest.raises(ValidationFailed) as refused:
            cursors.decode(bad)
        assert refused.value.code == "invalid_cursor"


def test_a_page_size_is_kept_between_one_and_the_most() -> None:
    assert [cursors.limit_of(n, 200) for n in (-5, 0, 1, 50, 200, 10_000)] == [
        1, 1, 1, 50, 200, 200]
