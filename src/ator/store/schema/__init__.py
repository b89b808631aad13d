"""Table definitions (layer: store; imports sqlalchemy and its own modules only).

Every tenant table carries `org_id`; repositories filter on it in every statement, so another
org's row is simply not found. Ids are UUIDs generated in Python (uuid4) so a row's id is known
before its INSERT, which lets one statement write a row and the rows that refer to it.

The per-turn tables (turns, events, mailbox, model_calls) carry no foreign keys: every row
is written by an INSERT … SELECT that checks its thread and org in the same statement, and
the RI triggers were a third of the cost of those hot inserts. Cold tables keep theirs.
Migrations (store/migrations) are the source of truth for the database; this module mirrors
them for query building, and a test checks that the two agree.

This package holds the core tables (orgs, keys, threads, turns, events, mailbox, model calls,
usage, jobs, ...); each feature's tables live in a module of it named for the feature
(workflows, approvals, schedules, webhooks, analyses, knowledge, retention, sso, tool_audit),
all on the one `metadata` of `columns`. Importing the package defines every table, which is
what alembic's env and tests/test_schema.py rely on; every table is re-exported here.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB, UUID

from ator.store.schema.analyses import analyses, analysis_daily, analysis_kinds, eval_runs
from ator.store.schema.approvals import pending_actions
from ator.store.schema.columns import _created, _id, _now, _org, _org_hot, metadata
from ator.store.schema.knowledge import (
    OPTIONAL_TABLES,
    knowledge_chunks,
    knowledge_documents,
    knowledge_generations,
    knowledge_queries,
    knowledge_versions,
)
from ator.store.schema.retention import purges, usage_purged
from ator.store.schema.schedules import schedules
from ator.store.schema.sso import sso_configs, sso_grants, sso_logins
from ator.store.schema.tool_audit import tool_audit
from ator.store.schema.webhooks import (
    webhook_attempts,
    webhook_deliveries,
    webhook_endpoints,
    webhook_events,
    webhook_inbound,
    webhook_received,
    webhook_threads,
)
from ator.store.schema.workflows import (
    run_origins,
    workflow_attempts,
    workflow_events,
    workflow_holds,
    workflow_runs,
    workflow_steps,
    workflow_threads,
    workflow_versions,
    workflows,
)

__all__ = [
    "OPTIONAL_TABLES",
    "analyses",
    "analysis_daily",
    "analysis_kinds",
    "api_keys",
    "eval_runs",
    "events",
    "jobs",
    "knowledge_chunks",
    "knowledge_documents",
    "knowledge_generations",
    "knowledge_queries",
    "knowledge_versions",
    "mailbox",
    "mcp_servers",
    "metadata",
    "model_calls",
    "org_usage",
    "orgs",
    "pending_actions",
    "prompt_versions",
    "provider_sessions",
    "purges",
    "run_origins",
    "schedules",
    "secrets",
    "sessions",
    "setups",
    "sso_configs",
    "sso_grants",
    "sso_logins",
    "threads",
    "tool_audit",
    "tool_results",
    "turns",
    "usage_purged",
    "users",
    "webhook_attempts",
    "webhook_deliveries",
    "webhook_endpoints",
    "webhook_events",
    "webhook_inbound",
    "webhook_received",
    "webhook_threads",
    "work_reservations",
    "workflow_attempts",
    "workflow_events",
    "workflow_holds",
    "workflow_runs",
    "workflow_steps",
    "workflow_threads",
    "workflow_versions",
    "workflows",
]

orgs = sa.Table(
    "orgs",
    metadata,
    _id(),
    sa.Column("name", sa.Text, nullable=False),
    # The org admin's own monthly budget; it may only be at or below the ceiling.
    sa.Column("monthly_budget_usd", sa.Numeric(14, 6), nullable=True),
    # The operator's monthly ceiling for the org, which the org cannot raise or clear.
    # The limit in force is LEAST(monthly_budget_usd, budget_ceiling_usd) (NULLs ignored).
    sa.Column("budget_ceiling_usd", sa.Numeric(14, 6), nullable=True),
    sa.Column("settings", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    _created(),
    # The org policy prompt layer in force (admins edit it; every version is kept in
    # prompt_versions). `policy_replace`: it replaces ator's core layer instead of following it.
    sa.Column("policy", sa.Text, nullable=False, server_default=""),
    sa.Column("policy_version", sa.Integer, nullable=False, server_default="0"),
    sa.Column("policy_replace", sa.Boolean, nullable=False, server_default=sa.false()),
)


users = sa.Table(
    "users",
    metadata,
    _id(),
    _org(),
    sa.Column("email", sa.Text, nullable=False),
    sa.Column("role", sa.Text, nullable=False),
    _created(),
    sa.UniqueConstraint("org_id", "email", name="uq_users_org_email"),
    sa.CheckConstraint("role in ('admin','member','viewer')", name="ck_users_role"),
)


api_keys = sa.Table(
    "api_keys",
    metadata,
    _id(),
    _org(),
    sa.Column(
        "user_id", UUID(as_uuid=True), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("prefix", sa.Text, nullable=False),
    sa.Column("hash", sa.Text, nullable=False, unique=True),
    sa.Column("role", sa.Text, nullable=False),
    sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
    _created(),
    sa.CheckConstraint("role in ('admin','member','viewer')", name="ck_api_keys_role"),
)


sessions = sa.Table(
    "sessions",
    metadata,
    _id(),
    _org(),
    sa.Column(
        "key_id", UUID(as_uuid=True), sa.ForeignKey("api_keys.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("hash", sa.Text, nullable=False, unique=True),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    _created(),
    sa.Index("ix_sessions_key", "key_id"),
)


setups = sa.Table(
    "setups",
    metadata,
    _id(),
    _org(),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("provider", sa.Text, nullable=False),
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("persona", sa.Text, nullable=False, server_default=""),
    # Caps and provider options; secrets appear here only as references ("secret:NAME").
    sa.Column("config", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("tool_policy", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("version", sa.Integer, nullable=False, server_default="1"),
    sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True),
    _created(),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
)


threads = sa.Table(
    "threads",
    metadata,
    _id(),
    _org(),
    sa.Column(
        "setup_id",
        UUID(as_uuid=True),
        sa.ForeignKey("setups.id", ondelete="RESTRICT"),
        nullable=False,
    ),
    sa.Column("created_by", UUID(as_uuid=True), nullable=True),
    sa.Column("title", sa.Text, nullable=False, server_default=""),
    sa.Column("instructions", sa.Text, nullable=False, server_default=""),
    # Subagent tree: a root thread has parent_id NULL, root_id = id, depth 0.
    sa.Column("parent_id", UUID(as_uuid=True), sa.ForeignKey("threads.id"), nullable=True),
    sa.Column("root_id", UUID(as_uuid=True), nullable=True),
    sa.Column("depth", sa.Integer, nullable=False, server_default="0"),
    # Last assigned event seq; bumped in the same statement that inserts events.
    sa.Column("last_seq", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("metadata", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
    _created(),
    # Bumped by every edit of `instructions` (0: as created); old texts are in prompt_versions.
    sa.Column("instructions_version", sa.Integer, nullable=False, server_default="0"),
    # Subagents (migration 0008): the child's short name, the parent's tool-use id that
    # spawned it (unique per parent: a retried spawn finds its child), the delegation
    # contract, and when its subtree was stopped (its result row in the parent's mailbox,
    # `subagent:<id>`, says it told its parent).
    sa.Column("alias", sa.Text, nullable=True),
    sa.Column("spawned_by", sa.Text, nullable=True),
    sa.Column("contract", JSONB, nullable=True),
    sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
    # Voice mode (migration 0022): the voice prompt layer on every turn of the thread.
    sa.Column("voice", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Index("ix_threads_org_created", "org_id", sa.text("created_at DESC"), "id"),
    sa.Index("ix_threads_parent", "parent_id"),
    sa.Index("uq_threads_spawned_by", "parent_id", "spawned_by", unique=True,
             postgresql_where=sa.text("spawned_by IS NOT NULL")),
    sa.Index("ix_threads_root", "root_id", postgresql_where=sa.text("parent_id IS NOT NULL")),
    # The trash, by age (retention: store/retention.py).
    sa.Index("ix_threads_trash", "org_id", "deleted_at",
             postgresql_where=sa.text("deleted_at IS NOT NULL")),
)


turns = sa.Table(
    "turns",
    metadata,
    _id(),
    _org_hot(),
    sa.Column("thread_id", UUID(as_uuid=True), nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("stop_reason", sa.Text, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("config_snapshot", JSONB, nullable=False),
    sa.Column("config_hash", sa.Text, nullable=False),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.Column("steps", sa.Integer, nullable=False, server_default="0"),
    sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cache_read_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cache_write_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cost_usd", sa.Numeric(14, 6), nullable=False, server_default="0"),
    # What the turn holds in the org's budget ledger for its model call in flight (ledger.py).
    sa.Column("reserved_usd", sa.Numeric(14, 6), nullable=False, server_default="0"),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint(
        "status in ('running','done','capped','budget','refused','waiting','stopped','lost',"
        "'error')",
        name="ck_turns_status",
    ),
    sa.Index("ix_turns_thread", "thread_id", "started_at"),
    sa.Index("ix_turns_running", "heartbeat_at", postgresql_where=sa.text("status = 'running'")),
    # The few turns holding a reservation, for the reaper's release sweep.
    sa.Index("ix_turns_reserved", "status", postgresql_where=sa.text("reserved_usd > 0")),
)


events = sa.Table(
    "events",
    metadata,
    _org_hot(),
    sa.Column("thread_id", UUID(as_uuid=True), nullable=False),
    sa.Column("turn_id", UUID(as_uuid=True), nullable=True),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("data", JSONB, nullable=False),
    _created(),
    # The key is also how events are read (a thread, after a seq).
    sa.PrimaryKeyConstraint("thread_id", "seq", name="pk_events"),
    # A turn's start finds the latest compaction summary of its thread (store/turns.py).
    sa.Index("ix_events_compaction", "thread_id", "seq",
             postgresql_where=sa.text("kind = 'compaction'")),
)


mailbox = sa.Table(
    "mailbox",
    metadata,
    _id(),
    _org_hot(),
    sa.Column("thread_id", UUID(as_uuid=True), nullable=False),
    sa.Column("client_message_id", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("content", JSONB, nullable=False),
    sa.Column("sender", UUID(as_uuid=True), nullable=True),
    # Set when a turn drains the item; NULL = pending.
    sa.Column("turn_id", UUID(as_uuid=True), nullable=True),
    _created(),
    # W3C traceparent of the request that posted it (NULL when tracing is off).
    sa.Column("traceparent", sa.Text, nullable=True),
    sa.UniqueConstraint("thread_id", "client_message_id", name="uq_mailbox_thread_client"),
    sa.Index(
        "ix_mailbox_pending",
        "thread_id",
        "created_at",
        postgresql_where=sa.text("turn_id IS NULL"),
    ),
    # Consumed items by age (retention).
    sa.Index("ix_mailbox_consumed", "org_id", "created_at",
             postgresql_where=sa.text("turn_id IS NOT NULL")),
)


model_calls = sa.Table(
    "model_calls",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    _org_hot(),
    # NULL for a call outside a turn (an analysis: `purpose` is its label; migration 0020).
    sa.Column("thread_id", UUID(as_uuid=True), nullable=True),
    sa.Column("turn_id", UUID(as_uuid=True), nullable=True),
    sa.Column("setup_id", UUID(as_uuid=True), nullable=True),
    sa.Column("step", sa.Integer, nullable=False),
    sa.Column("purpose", sa.Text, nullable=False, server_default="step"),
    sa.Column("provider", sa.Text, nullable=False),
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("stop_reason", sa.Text, nullable=True),
    sa.Column("input_tokens", sa.BigInteger, nullable=False),
    sa.Column("output_tokens", sa.BigInteger, nullable=False),
    sa.Column("cache_read_tokens", sa.BigInteger, nullable=False),
    sa.Column("cache_write_tokens", sa.BigInteger, nullable=False),
    sa.Column("usage_reported", sa.Boolean, nullable=False),
    # Some figure is an estimate (a call cut short before the provider reported it).
    sa.Column("usage_estimated", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("cost_usd", sa.Numeric(14, 6), nullable=False),
    sa.Column("priced", sa.Boolean, nullable=False),
    # Where cost_usd came from: catalog, provider (reported it), unpriced (0, flagged).
    sa.Column("cost_source", sa.Text, nullable=False, server_default="catalog"),
    sa.Column("duration_ms", sa.Integer, nullable=False),
    # What was sent: layer names/hashes, tool names, sizes (never the secrets).
    sa.Column("request_meta", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    _created(),
    sa.Index("ix_model_calls_turn", "turn_id"),
    sa.Index("ix_model_calls_thread", "thread_id", "id"),
    sa.Index("ix_model_calls_org_created", "org_id", "created_at"),
)


org_usage = sa.Table(
    "org_usage",
    metadata,
    _org(),
    sa.Column("month", sa.Date, nullable=False),
    # 0: the budget row (reservations, and the spend of calls that reserved); 1..N: spend of
    # calls without a budget, spread by turn so no one row takes every write of an org.
    sa.Column("shard", sa.SmallInteger, nullable=False, server_default="0"),
    sa.Column("cost_usd", sa.Numeric(14, 6), nullable=False, server_default="0"),
    sa.Column("tokens", sa.BigInteger, nullable=False, server_default="0"),
    # Worst cases of the model calls in flight (store/ledger.py); spend + reserved <= limit.
    sa.Column("reserved_usd", sa.Numeric(14, 6), nullable=False, server_default="0"),
    sa.PrimaryKeyConstraint("org_id", "month", "shard", name="pk_org_usage"),
)


secrets = sa.Table(
    "secrets",
    metadata,
    _id(),
    _org(),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("nonce", sa.LargeBinary, nullable=False),
    sa.Column("ciphertext", sa.LargeBinary, nullable=False),
    sa.Column("key_id", sa.Text, nullable=False),
    _created(),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.UniqueConstraint("org_id", "name", name="uq_secrets_org_name"),
)


# An org's MCP servers: headers hold secret references only ("secret:NAME"); `catalog` is
# the tool list the last test synced, `last_test` what that test found.
mcp_servers = sa.Table(
    "mcp_servers",
    metadata,
    _id(),
    _org(),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("transport", sa.Text, nullable=False),
    sa.Column("url", sa.Text, nullable=True),
    sa.Column("headers", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("timeout_s", sa.Float, nullable=False, server_default="30"),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("allow", JSONB, nullable=True),
    sa.Column("deny", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
    sa.Column("catalog", JSONB, nullable=True),
    sa.Column("last_test", JSONB, nullable=True),
    sa.Column("version", sa.Integer, nullable=False, server_default="1"),
    _created(),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.UniqueConstraint("org_id", "name", name="uq_mcp_servers_org_name"),
    sa.CheckConstraint("transport in ('http','stdio')", name="ck_mcp_servers_transport"),
)


# Every version of an editable prompt layer (the org policy, a thread's instructions) ever
# set; the one in force is also on its owner's row, where a turn's start reads it.
prompt_versions = sa.Table(
    "prompt_versions",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    _org(),
    sa.Column("layer", sa.Text, nullable=False),
    sa.Column("thread_id", UUID(as_uuid=True), sa.ForeignKey("threads.id", ondelete="CASCADE"),
              nullable=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("replace", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("set_by", UUID(as_uuid=True), nullable=True),
    sa.Column("set_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.Index("ix_prompt_versions_owner", "org_id", "layer", "thread_id", "version"),
    sa.CheckConstraint("layer in ('org_policy','thread')", name="ck_prompt_versions_layer"),
)


# Tool results stored whole when longer than what the model reads at once (paged by the
# native read_tool_result tool). Per-turn data: no foreign keys (see the module docstring).
tool_results = sa.Table(
    "tool_results",
    metadata,
    _id(),
    _org_hot(),
    sa.Column("thread_id", UUID(as_uuid=True), nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    _created(),
    sa.Index("ix_tool_results_thread", "org_id", "thread_id"),
)


# A provider's opaque state per thread (a CLI runtime's session id), written with the step
# that returned it and read before a turn's first call (providers whose factory keeps
# sessions only). Per-turn data: no foreign keys (see the module docstring).
provider_sessions = sa.Table(
    "provider_sessions",
    metadata,
    _org_hot(),
    sa.Column("thread_id", UUID(as_uuid=True), primary_key=True),
    sa.Column("provider", sa.Text, primary_key=True),
    sa.Column("state", JSONB, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
)


# Durable jobs (ator.jobs; store/jobs.py): a hot table, no foreign keys. `state` is queued →
# running (under a lease: lease_owner, lease_until) → done or dead, or back to queued to retry.
jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    _org_hot(),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("payload", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("state", sa.Text, nullable=False, server_default="queued"),
    sa.Column("priority", sa.SmallInteger, nullable=False, server_default="0"),
    sa.Column("run_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.Column("attempt", sa.Integer, nullable=False, server_default="0"),
    sa.Column("max_attempts", sa.Integer, nullable=False),
    sa.Column("lease_owner", sa.Text, nullable=True),
    sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
    sa.Column("unique_key", sa.Text, nullable=True),
    sa.Column("request_id", sa.Text, nullable=True),
    sa.Column("schedule_id", UUID(as_uuid=True), nullable=True),
    sa.Column("tick", sa.DateTime(timezone=True), nullable=True),
    sa.Column("last_error", sa.Text, nullable=True),
    _created(),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    # W3C traceparent of whoever enqueued it (NULL when tracing is off).
    sa.Column("traceparent", sa.Text, nullable=True),
    sa.CheckConstraint("state in ('queued','running','done','dead')", name="ck_jobs_state"),
    sa.Index("ix_jobs_ready", "kind", "org_id", sa.text("priority DESC"), "run_at", "id",
             postgresql_where=sa.text("state = 'queued'")),
    sa.Index("ix_jobs_running", "kind", "org_id", postgresql_where=sa.text("state = 'running'")),
    sa.Index("ix_jobs_lease", "lease_until", postgresql_where=sa.text("state = 'running'")),
    sa.Index("ix_jobs_finished", "state", "finished_at",
             postgresql_where=sa.text("state IN ('done','dead')")),
    sa.Index("uq_jobs_unique", "org_id", "kind", "unique_key", unique=True,
             postgresql_where=sa.text("unique_key IS NOT NULL AND state IN ('queued','running')")),
    sa.Index("uq_jobs_tick", "schedule_id", "tick", unique=True,
             postgresql_where=sa.text("schedule_id IS NOT NULL")),
)


# Model work outside a turn (store/ledger.py): a call's worst case held until it settles;
# the reaper's sweep gives back what an expired holder kept (migration 0020).
work_reservations = sa.Table(
    "work_reservations",
    metadata,
    _id(),
    _org_hot(),
    sa.Column("label", sa.Text, nullable=False),
    sa.Column("amount", sa.Numeric(14, 6), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    _created(),
    sa.Index("ix_work_reservations_expires", "expires_at"),
)

