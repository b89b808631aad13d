"""Prompt layers: the org's policy and a thread's instructions, versioned.

The text in force lives on its owner's row (`orgs.policy`, `threads.instructions`) so a turn
reads it in the statement that starts it; every version ever set is kept in
`prompt_versions` (version 0 is what the org or thread started with and has no row).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import UUID

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("orgs", sa.Column("policy", sa.Text, nullable=False, server_default=""))
    op.add_column("orgs", sa.Column("policy_version", sa.Integer, nullable=False,
                                    server_default="0"))
    op.add_column("orgs", sa.Column("policy_replace", sa.Boolean, nullable=False,
                                    server_default=sa.false()))
    op.add_column("threads", sa.Column("instructions_version", sa.Integer, nullable=False,
                                       server_default="0"))
    op.create_table(
        "prompt_versions",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("layer", sa.Text, nullable=False),
        sa.Column("thread_id", UUID(as_uuid=True),
                  sa.ForeignKey("threads.id", ondelete="CASCADE"), nullable=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("replace", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("set_by", UUID(as_uuid=True), nullable=True),
        sa.Column("set_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.CheckConstraint("layer in ('org_policy','thread')", name="ck_prompt_versions_layer"),
    )
    op.create_index("ix_prompt_versions_owner", "prompt_versions",
                    ["org_id", "layer", "thread_id", "version"])
    # The inspector diffs a call against the thread's previous one.
    op.create_index("ix_model_calls_thread", "model_calls", ["thread_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_model_calls_thread", table_name="model_calls")
    op.drop_index("ix_prompt_versions_owner", table_name="prompt_versions")
    op.drop_table("prompt_versions")
    op.drop_column("threads", "instructions_version")
    op.drop_column("orgs", "policy_replace")
    op.drop_column("orgs", "policy_version")
    op.drop_column("orgs", "policy")
