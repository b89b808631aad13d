"""Usage and spend, read back from model_calls (layer: store).

Every figure is summed from the per-call rows the engine wrote, so usage by org, thread and
setup always agree with each other and with the turns.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ator.store.database import Database
from ator.store.scope import Scope

__all__ = ["GROUPS", "mailbox_depth", "mailbox_lag", "month_bounds", "spent_since", "usage"]

GROUPS = ("org", "thread", "setup")


def month_bounds(month: date) -> tuple[date, date]:
    start = month.replace(day=1)
    end = date(start.year + start.month // 12, start.month % 12 + 1, 1)
    return start, end


async def usage(db: Database, scope: Scope, *, month: date, group: str) -> list[dict[str, Any]]:
    key = {"org": "org_id", "thread": "thread_id", "setup": "setup_id"}[group]
    start, end = month_bounds(month)
    # A purged thread's calls are summed per hour in usage_purged (store/retention.py):
    # read beside model_calls, a purge changes no total.
    stmt = sa.text(f"""
        SELECT key, sum(calls) AS calls,
               COALESCE(sum(input_tokens), 0) AS input_tokens,
               COALESCE(sum(output_tokens), 0) AS output_tokens,
               COALESCE(sum(cache_read_tokens), 0) AS cache_read_tokens,
               COALESCE(sum(cache_write_tokens), 0) AS cache_write_tokens,
               COALESCE(sum(cost_usd), 0) AS cost_usd,
               bool_and(priced) AS all_priced
          FROM (SELECT {key} AS key, count(*) AS calls, sum(input_tokens) AS input_tokens,
                       sum(output_tokens) AS output_tokens,
                       sum(cache_read_tokens) AS cache_read_tokens,
                       sum(cache_write_tokens) AS cache_write_tokens,
                       sum(cost_usd) AS cost_usd, bool_and(priced) AS priced
                  FROM model_calls
                 WHERE org_id = :org_id AND created_at >= :start AND created_at < :end
                 GROUP BY {key}
                UNION ALL
                SELECT {key}, sum(calls), sum(input_tokens), sum(output_tokens),
                       sum(cache_read_tokens), sum(cache_write_tokens), sum(cost_usd),
                       bool_and(all_priced)
                  FROM usage_purged
                 WHERE org_id = :org_id AND hour >= :start AND hour < :end
                 GROUP BY {key}) u
         GROUP BY key
         ORDER BY sum(cost_usd) DESC, key
    """)
    rows = await db.read(stmt, {"org_id": scope.org_id, "start": start, "end": end})
    return [
        {
            "key": str(r.key) if r.key is not None else None,
            "calls": int(r.calls),
            "input_tokens": int(r.input_tokens),
            "output_tokens": int(r.output_tokens),
            "cache_read_tokens": int(r.cache_read_tokens),
            "cache_write_tokens": int(r.cache_write_tokens),
            "cost_usd": str(Decimal(r.cost_usd)),
            "all_priced": bool(r.all_priced),
        }
        for r in rows
    ]


async def mailbox_lag(db: Database) -> float:
    """Seconds the oldest item waiting for a turn has waited, all orgs (0 when none)."""
    rows = await db.read(sa.text(
        "SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0) AS lag"
        " FROM mailbox WHERE turn_id IS NULL"))
    return float(rows[0].lag)


async def mailbox_depth(db: Database) -> int:
    """Items waiting for a turn, all orgs (for /metrics)."""
    rows = await db.read(sa.text("SELECT count(*) AS n FROM mailbox WHERE turn_id IS NULL"))
    return int(rows[0].n)


async def spent_since(db: Database, scope: Scope, since: datetime, setup_id: UUID
                      ) -> tuple[Decimal, Decimal]:
    """USD billed since `since` by the org, and by its setup `setup_id` (one statement over
    `ix_model_calls_org_created`, and the purged calls' hourly sums: a purged hour that
    straddles `since` counts whole)."""
    rows = await db.read(sa.text("""
        SELECT COALESCE(sum(cost_usd), 0) AS org,
               COALESCE(sum(cost_usd) FILTER (WHERE setup_id = :setup_id), 0) AS setup
          FROM (SELECT cost_usd, setup_id FROM model_calls
                 WHERE org_id = :org_id AND created_at >= :since
                UNION ALL
                SELECT cost_usd, setup_id FROM usage_purged
                 WHERE org_id = :org_id
                   AND hour >= date_trunc('hour', CAST(:since AS timestamptz))) u
    """), {"org_id": scope.org_id, "since": since, "setup_id": setup_id})
    return Decimal(rows[0].org), Decimal(rows[0].setup)
