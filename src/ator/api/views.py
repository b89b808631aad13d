"""How records look on the wire (layer: api; imports store.records).

Money is a decimal string, times are ISO 8601, ids are UUID strings. Turn snapshots are
already redacted when stored; they are redacted again on the way out.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ator.engine.wire import event_frame
from ator.security.redact import redact
from ator.store.records import ApiKey, Event, MailboxItem, Org, Setup, Thread, TreeNode, Turn

__all__ = ["event", "item", "key", "org", "setup", "thread", "tree", "turn"]


def _usd(value: Any) -> str | None:
    return str(value) if value is not None else None


def org(o: Org) -> dict[str, Any]:
    return {"id": str(o.id), "name": o.name, "created_at": o.created_at.isoformat(),
            "monthly_budget_usd": _usd(o.monthly_budget_usd),
            "budget_ceiling_usd": _usd(o.budget_ceiling_usd),
            "budget_limit_usd": _usd(o.budget_limit_usd)}


def key(k: ApiKey) -> dict[str, Any]:
    return {
        "id": str(k.id), "name": k.name, "prefix": k.prefix, "role": k.role,
        "user_id": str(k.user_id), "created_at": k.created_at.isoformat(),
        "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None,
        "last_used_at": k.last_used_at.isoformat() if k.last_used_at else None,
    }


def setup(s: Setup) -> dict[str, Any]:
    return {
        "id": str(s.id), "name": s.name, "provider": s.provider, "model": s.model,
        "persona": s.persona, "config": redact(s.config), "tool_policy": s.tool_policy,
        "version": s.version, "created_at": s.created_at.isoformat(),
        "archived_at": s.archived_at.isoformat() if s.archived_at else None,
    }


def thread(t: Thread, *, busy: bool | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": str(t.id), "setup_id": str(t.setup_id), "title": t.title,
        "instructions": t.instructions, "metadata": t.metadata, "last_seq": t.last_seq,
        "parent_id": str(t.parent_id) if t.parent_id else None, "depth": t.depth,
        "created_at": t.created_at.isoformat(), "voice": t.voice,
    }
    if busy is not None:
        out["busy"] = busy
    return out


def item(i: MailboxItem, *, created: bool) -> dict[str, Any]:
    return {
        "id": str(i.id), "thread_id": str(i.thread_id),
        "client_message_id": i.client_message_id, "kind": i.kind, "content": i.content,
        "turn_id": str(i.turn_id) if i.turn_id else None,
        "created_at": i.created_at.isoformat(), "created": created,
    }


def event(thread_id: UUID, e: Event) -> dict[str, Any]:
    """The one frame format of an event (engine/wire.py), as every other reader sees it."""
    return event_frame(thread_id, e)


def turn(t: Turn) -> dict[str, Any]:
    return {
        "id": str(t.id), "thread_id": str(t.thread_id), "status": t.status,
        "stop_reason": t.stop_reason, "error": t.error, "owner": t.owner, "steps": t.steps,
        "usage": {"input_tokens": t.input_tokens, "output_tokens": t.output_tokens,
                  "cache_read_tokens": t.cache_read_tokens,
                  "cache_write_tokens": t.cache_write_tokens},
        "cost_usd": str(t.cost_usd), "config_hash": t.config_hash,
        "config_snapshot": redact(t.config_snapshot),
        "started_at": t.started_at.isoformat(),
        "ended_at": t.ended_at.isoformat() if t.ended_at else None,
    }


def tree(nodes: list[TreeNode]) -> dict[str, Any]:
    """A thread and its subagents, nested: each node with its title, status, steps, tokens,
    USD and whether a turn runs now (`live`). `nodes` come parents first."""
    views: dict[Any, dict[str, Any]] = {}
    for n in nodes:
        views[n.id] = {
            "id": str(n.id), "parent_id": str(n.parent_id) if n.parent_id else None,
            "alias": n.alias, "title": n.title, "depth": n.depth, "status": n.status,
            "steps": n.steps, "tokens": n.tokens, "usd": str(n.usd), "live": n.live,
            "result_delivered": n.told, "created_at": n.created_at.isoformat(),
            "children": [],
        }
        if n.parent_id in views and n is not nodes[0]:
            views[n.parent_id]["children"].append(views[n.id])
    return views[nodes[0].id]
