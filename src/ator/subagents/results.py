"""What a parent is told when a child ends (layer: subagents; imports tools.base, outcome).

A result is one mailbox item of kind `notification` in the parent's mailbox. Its `text` is
the child's final text, capped at `SUMMARY_CHARS`, inside a `<subagent_result …>` element
whose attributes ator writes (status, steps, tokens, USD, duration); in the child's text,
anything that could pass for that element's end, the untrusted-data wrapper or a role
marker is neutralized (`tools.base.neutralize`). The history wraps the whole item as
untrusted data (`agent.history.injected_blocks`), so the model reads it as data.
"""

from __future__ import annotations

import html
from decimal import Decimal
from typing import Any
from uuid import UUID

from ator.tools.base import neutralize

__all__ = ["PAGE_CHARS", "SUMMARY_CHARS", "TAGS", "render", "status_of_turn"]

SUMMARY_CHARS = 4_000  # what the parent reads at once; agent_result pages through the rest
PAGE_CHARS = 16_000
TAGS = ("subagent_result", "untrusted-data")


def status_of_turn(status: str, stop_reason: str) -> tuple[str, str | None]:
    """The result status (`done`, `errored`, `cancelled`, `budget`) and, when not done, the
    reason, from how the child's turn ended (outcome.py statuses)."""
    if status == "done":
        return "done", None
    if status == "budget":
        return "budget", stop_reason
    if status == "stopped":
        return "cancelled", stop_reason.split(":", 1)[-1]
    if status == "lost":
        return "errored", "lost"
    return "errored", stop_reason.removeprefix("error:")


def render(
    *, child_id: UUID, alias: str, title: str, status: str, reason: str | None, steps: int,
    tokens: int, usd: Decimal, text: str, error: str | None,
) -> tuple[dict[str, Any], str]:
    """The result's content (for the parent's mailbox) and its text, where `{duration}`
    stands for the child's age in seconds (filled in by the statement that pushes it)."""
    body = text.strip() or "(the subagent wrote no text)"
    cut = len(body) > SUMMARY_CHARS
    shown = neutralize(body[:SUMMARY_CHARS], TAGS)
    attrs = {"id": str(child_id), "alias": alias, "title": title, "status": status}
    if reason:
        attrs["reason"] = reason
    attrs.update({"steps": str(steps), "tokens": str(tokens), "usd": str(usd)})
    head = " ".join(f'{k}="{html.escape(v, quote=True)}"' for k, v in attrs.items())
    lines = [f'<subagent_result {head} duration_s="{{duration}}">', shown]
    if error:
        lines.append(f"[ator] The subagent's turn ended with: {neutralize(error, TAGS)}")
    if cut:
        lines.append(f"[ator] Cut at {SUMMARY_CHARS} of {len(body)} characters: call "
                     f'agent_result(id="{alias}", page=1) for all of it.')
    lines.append("</subagent_result>")
    content = {
        "source": f"subagent {alias}",
        "subagent": {"id": str(child_id), "alias": alias, "title": title, "status": status,
                     "reason": reason, "steps": steps, "tokens": tokens, "usd": str(usd),
                     "chars": len(text), "truncated": cut},
    }
    return content, "\n".join(lines)
