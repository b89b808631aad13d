"""Webhooks, second slice: inbound verification methods (Standard Webhooks, a provider-style
HMAC header, a secret token in the path) and a per-endpoint size limit; mappings written in
JSONata with a target (a thread: fixed, new, or found by a key; or a workflow run); what
each received request became; when an outbound endpoint was disabled.

Revision ID: 0019
Revises: 0014
"""

from __future__ import annotations

import json
import re

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0019"
down_revision = "0017"
branch_labels = None
depends_on = None

_FIELD = re.compile(r"\{\{|\}\}|\{(/[^{}]*)\}")


def _jsonata(template: str) -> str:
    """The first slice's `{/json/pointer}` template as the JSONata expression it meant."""
    parts: list[str] = []
    at = 0
    literal = ""
    for match in _FIELD.finditer(template):
        literal += template[at:match.start()]
        at = match.end()
        if match.group(0) in ("{{", "}}"):
            literal += match.group(0)[0]
            continue
        if literal:
            parts.append(json.dumps(literal))
            literal = ""
        steps: list[str] = []
        for raw in match.group(1).split("/")[1:]:
            token = raw.replace("~1", "/").replace("~0", "~")
            if token.isdigit() and steps:
                steps[-1] += f"[{token}]"
            else:
                steps.append("`" + token.replace("`", "") + "`")
        parts.append(f"$string({'.'.join(steps) or '$'})")
    literal += template[at:]
    if literal:
        parts.append(json.dumps(literal))
    return " & ".join(parts) or '""'


def upgrade() -> None:
    op.add_column("webhook_inbound", sa.Column(
        "verification", JSONB, nullable=False,
        server_default=sa.text("""'{"method": "standard_webhooks"}'::jsonb""")))
    op.add_column("webhook_inbound", sa.Column("max_bytes", sa.Integer, nullable=True))
    op.alter_column("webhook_inbound", "thread_id", nullable=True)
    op.add_column("webhook_received", sa.Column("result", JSONB, nullable=True))
    op.add_column("webhook_endpoints", sa.Column("disabled_at", sa.DateTime(timezone=True),
                                                 nullable=True))
    op.create_table(
        "webhook_threads",  # the thread each mapping key reaches (one per endpoint and key)
        sa.Column("endpoint_id", UUID(as_uuid=True),
                  sa.ForeignKey("webhook_inbound.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), nullable=False),
        sa.Column("thread_id", UUID(as_uuid=True),
                  sa.ForeignKey("threads.id", ondelete="CASCADE"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
    )
    op.create_index("ix_webhook_received_endpoint", "webhook_received",
                    ["endpoint_id", "created_at"])
    conn = op.get_bind()
    for row in conn.execute(sa.text("SELECT id, thread_id, mapping FROM webhook_inbound")):
        old = row.mapping
        if isinstance(old, dict) and "to" not in old and isinstance(old.get("text"), str):
            new = {"to": "thread", "thread_id": str(row.thread_id),
                   "text": _jsonata(old["text"])}
            conn.execute(sa.text("UPDATE webhook_inbound SET mapping = CAST(:m AS jsonb) "
                                 "WHERE id = :id"), {"m": json.dumps(new), "id": row.id})


def downgrade() -> None:
    op.drop_index("ix_webhook_received_endpoint", "webhook_received")
    op.drop_table("webhook_threads")
    op.drop_column("webhook_endpoints", "disabled_at")
    op.drop_column("webhook_received", "result")
    op.execute("DELETE FROM webhook_inbound WHERE thread_id IS NULL")
    op.alter_column("webhook_inbound", "thread_id", nullable=False)
    op.drop_column("webhook_inbound", "max_bytes")
    op.drop_column("webhook_inbound", "verification")
