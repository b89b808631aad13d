"""Table definitions (layer: store; imports sqlalchemy only).

Every tenant table carries `org_id`; repositories filter on it in every statement, so another
org's row is simply not found. Ids are UUIDs generated in Python (uuid4) so a row's id is known
before its INSERT, which lets one statement write a row and the rows that refer to it.

The per-turn tables (turns, events, mailbox, model_calls) carry no foreign keys: every row
is written by an INSERT … SELECT that checks its thread and org in the same statement, and
the RI triggers were a third of the cost of those hot inserts. Cold tables keep theirs.
Migrations (store/migrations) are the source of truth for the database; this module mirrors
them for query building, and a test checks that the two agree.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB, UUID

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
    "work_reservations",
    "workflow_attempts",
    "workflow_events",
    "workflow_runs",
    "workflow_steps",
    "workflow_threads",
    "workflow_versions",
    "workflows",
]

metadata = sa.MetaData()

_now = sa.text("now()")


def _id() -> sa.Column[object]:
    return sa.Column("id", UUID(as_uuid=True), primary_key=True)


def _org() -> sa.Column[object]:
    return sa.Column(
        "org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False
    )


def _org_hot() -> sa.Column[object]:
    """org_id on the per-turn tables, without a foreign key (see the module docstring)."""
    return sa.Column("org_id", UUID(as_uuid=True), nullable=False)


def _created() -> sa.Column[object]:
    return sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now)


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

# One row per tool call made outside a turn (the MCP gateway, a workflow step): who, which
# tool, a hash of the arguments (never the arguments), how long, how much, how it ended.
tool_audit = sa.Table(
    "tool_audit",
    metadata,
    _id(),
    _org(),
    sa.Column("principal_kind", sa.Text, nullable=False),
    sa.Column("principal_id", UUID(as_uuid=True), nullable=False),
    sa.Column("tool", sa.Text, nullable=False),
    sa.Column("args_sha256", sa.Text, nullable=False),
    sa.Column("duration_ms", sa.Integer, nullable=False),
    sa.Column("result_chars", sa.Integer, nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("error_code", sa.Text, nullable=True),
    _created(),
    sa.Index("ix_tool_audit_org_created", "org_id", "created_at", "id"),
    sa.CheckConstraint("principal_kind in ('user','key')", name="ck_tool_audit_principal"),
    sa.CheckConstraint("outcome in ('ok','error')", name="ck_tool_audit_outcome"),
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

# Schedules as rows (store/schedules.py): cron in an IANA zone; `next_tick` is the next due
# instant (UTC), advanced in the transaction that enqueues its job, so a tick fires once
# across replicas. `pending` is the tick buffered behind a firing still active (overlap
# "buffer").
schedules = sa.Table(
    "schedules",
    metadata,
    _id(),
    _org(),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("payload", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("cron", sa.Text, nullable=False),
    sa.Column("zone", sa.Text, nullable=False),
    sa.Column("overlap", sa.Text, nullable=False, server_default="skip"),
    sa.Column("catch_up", sa.Float, nullable=False, server_default="60"),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("next_tick", sa.DateTime(timezone=True), nullable=False),
    sa.Column("last_tick", sa.DateTime(timezone=True), nullable=True),
    sa.Column("pending", sa.DateTime(timezone=True), nullable=True),
    _created(),
    sa.UniqueConstraint("org_id", "name", name="uq_schedules_org_name"),
    sa.CheckConstraint("overlap in ('skip','buffer','allow')", name="ck_schedules_overlap"),
    sa.Index("ix_schedules_due", "next_tick", postgresql_where=sa.text("enabled")),
)

# Webhooks (ator.webhooks, store/webhooks.py). Outbound: an org's endpoints, the outbox of
# events (written in the transaction of what they report), one delivery per (endpoint, event)
# and its log of attempts. Inbound: an org's receiving endpoints and every request they
# accepted, kept raw before the 2xx and unique per (endpoint, webhook id).
webhook_endpoints = sa.Table(
    "webhook_endpoints",
    metadata,
    sa.Column("id", UUID(as_uuid=True), primary_key=True),
    _org(),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("description", sa.Text, nullable=False, server_default=""),
    sa.Column("event_types", sa.ARRAY(sa.Text), nullable=False, server_default="{}"),
    sa.Column("secret_nonce", sa.LargeBinary, nullable=False),
    sa.Column("secret_ct", sa.LargeBinary, nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("disabled_reason", sa.Text, nullable=True),
    # The secret before the last rotation, still signing until `previous_until`.
    sa.Column("previous_nonce", sa.LargeBinary, nullable=True),
    sa.Column("previous_ct", sa.LargeBinary, nullable=True),
    sa.Column("previous_until", sa.DateTime(timezone=True), nullable=True),
    # Since when every attempt failed (NULL after a success): too long disables it.
    sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True),
    _created(),
    sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True),
    sa.Index("ix_webhook_endpoints_org", "org_id"),
)

webhook_events = sa.Table(
    "webhook_events",
    metadata,
    sa.Column("id", UUID(as_uuid=True), primary_key=True),
    _org_hot(),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),  # the exact bytes every attempt signs
    _created(),
    sa.Index("ix_webhook_events_org", "org_id", "created_at"),
)

webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("id", UUID(as_uuid=True), primary_key=True),
    _org_hot(),
    sa.Column("endpoint_id", UUID(as_uuid=True),
              sa.ForeignKey("webhook_endpoints.id", ondelete="CASCADE"), nullable=False),
    sa.Column("event_id", UUID(as_uuid=True),
              sa.ForeignKey("webhook_events.id", ondelete="CASCADE"), nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default="pending"),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_status", sa.Integer, nullable=True),
    _created(),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    sa.UniqueConstraint("endpoint_id", "event_id", name="uq_webhook_deliveries_endpoint_event"),
    sa.CheckConstraint("status in ('pending','delivered','failed','skipped')",
                       name="ck_webhook_deliveries_status"),
    sa.Index("ix_webhook_deliveries_endpoint", "endpoint_id", "created_at"),
)

webhook_attempts = sa.Table(
    "webhook_attempts",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    _org_hot(),
    sa.Column("delivery_id", UUID(as_uuid=True),
              sa.ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("status_code", sa.Integer, nullable=True),
    sa.Column("latency_ms", sa.Integer, nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("response_excerpt", sa.Text, nullable=True),
    _created(),
    sa.Index("ix_webhook_attempts_delivery", "delivery_id", "attempt"),
)

webhook_inbound = sa.Table(
    "webhook_inbound",
    metadata,
    sa.Column("id", UUID(as_uuid=True), primary_key=True),
    _org(),
    sa.Column("name", sa.Text, nullable=False),
    # The fixed thread of a mapping `{"to": "thread", "thread_id": …}` (NULL otherwise).
    sa.Column("thread_id", UUID(as_uuid=True), sa.ForeignKey("threads.id", ondelete="CASCADE"),
              nullable=True),
    sa.Column("mapping", JSONB, nullable=False),
    sa.Column("secret_nonce", sa.LargeBinary, nullable=False),
    sa.Column("secret_ct", sa.LargeBinary, nullable=False),
    _created(),
    sa.Column("verification", JSONB, nullable=False,
              server_default=sa.text("""'{"method": "standard_webhooks"}'::jsonb""")),
    sa.Column("max_bytes", sa.Integer, nullable=True),
    sa.Index("ix_webhook_inbound_org", "org_id"),
)

# The thread each inbound mapping key reaches (migration 0019).
webhook_threads = sa.Table(
    "webhook_threads",
    metadata,
    sa.Column("endpoint_id", UUID(as_uuid=True),
              sa.ForeignKey("webhook_inbound.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("key", sa.Text, primary_key=True),
    _org_hot(),
    sa.Column("thread_id", UUID(as_uuid=True), sa.ForeignKey("threads.id", ondelete="CASCADE"),
              nullable=False),
    _created(),
)

webhook_received = sa.Table(
    "webhook_received",
    metadata,
    sa.Column("id", UUID(as_uuid=True), primary_key=True),
    _org_hot(),
    sa.Column("endpoint_id", UUID(as_uuid=True),
              sa.ForeignKey("webhook_inbound.id", ondelete="CASCADE"), nullable=False),
    sa.Column("webhook_id", sa.Text, nullable=False),
    sa.Column("headers", JSONB, nullable=False),
    sa.Column("body", sa.LargeBinary, nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default="received"),
    sa.Column("error", sa.Text, nullable=True),
    _created(),
    sa.Column("result", JSONB, nullable=True),  # what it became: {thread_id} or {run_id}
    sa.UniqueConstraint("endpoint_id", "webhook_id", name="uq_webhook_received_endpoint_id"),
    sa.CheckConstraint("status in ('received','delivered','failed')",
                       name="ck_webhook_received_status"),
    sa.Index("ix_webhook_received_endpoint", "endpoint_id", "created_at"),
)

# Workflows (ator.workflows; store/workflows.py, migration 0012). A run pins its recipe; its
# steps are unique per (run, path); attempts are unique per (step, attempt); its events
# carry a per-run seq taken from `workflow_runs.event_seq`.
workflows = sa.Table(
    "workflows",
    metadata,
    _id(),
    _org(),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("latest_version", sa.Integer, nullable=False, server_default="0"),
    _created(),
    sa.UniqueConstraint("org_id", "name", name="uq_workflows_org_name"),
)

workflow_versions = sa.Table(
    "workflow_versions",
    metadata,
    sa.Column("workflow_id", UUID(as_uuid=True),
              sa.ForeignKey("workflows.id", ondelete="CASCADE"), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    _org(),
    sa.Column("recipe", JSONB, nullable=False),
    sa.Column("sha256", sa.Text, nullable=False),
    sa.Column("published_by", UUID(as_uuid=True), nullable=True),
    sa.Column("published_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.PrimaryKeyConstraint("workflow_id", "version"),
)

workflow_runs = sa.Table(
    "workflow_runs",
    metadata,
    _id(),
    _org(),
    sa.Column("workflow_id", UUID(as_uuid=True),
              sa.ForeignKey("workflows.id", ondelete="CASCADE"), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("recipe", JSONB, nullable=False),
    sa.Column("input", JSONB, nullable=False),
    sa.Column("idempotency_key", sa.Text, nullable=True),
    sa.Column("status", sa.Text, nullable=False, server_default="running"),
    sa.Column("output", JSONB, nullable=True),
    sa.Column("fail_reason", sa.Text, nullable=True),
    sa.Column("pause_reason", sa.Text, nullable=True),
    sa.Column("cancel_reason", sa.Text, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("max_steps", sa.Integer, nullable=False),
    sa.Column("steps_used", sa.Integer, nullable=False, server_default="0"),
    sa.Column("wall_clock_s", sa.Float, nullable=False),
    sa.Column("deadline", sa.DateTime(timezone=True), nullable=False),
    sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("changes", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("event_seq", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("lease_owner", sa.Text, nullable=True),
    sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
    sa.Column("created_by", UUID(as_uuid=True), nullable=True),
    _created(),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    # migration 0015: the usd budget and what the run's agent steps spent; the no-progress
    # clock (idle_s from the last progress)
    sa.Column("usd_budget", sa.Numeric(18, 6), nullable=True),
    sa.Column("spent_usd", sa.Numeric(18, 6), nullable=False, server_default="0"),
    sa.Column("idle_s", sa.Float, nullable=True),
    sa.Column("progress_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    # migration 0023: a sub-run's parent run and step, and its depth; `waiting` while a
    # `human` step's gate is open (paused_at: since when)
    sa.Column("parent_run_id", UUID(as_uuid=True),
              sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), nullable=True),
    sa.Column("parent_step_id", UUID(as_uuid=True), nullable=True),
    sa.Column("depth", sa.Integer, nullable=False, server_default="0"),
    sa.CheckConstraint(
        "status in ('running','paused','waiting','succeeded','failed','cancelled')",
        name="ck_workflow_runs_status"),
    sa.Index("uq_workflow_runs_key", "org_id", "idempotency_key", unique=True,
             postgresql_where=sa.text("idempotency_key IS NOT NULL")),
    sa.Index("ix_workflow_runs_org_created", "org_id", "created_at", "id"),
    sa.Index("ix_workflow_runs_parent", "parent_run_id",
             postgresql_where=sa.text("parent_run_id IS NOT NULL")),
)

workflow_steps = sa.Table(
    "workflow_steps",
    metadata,
    _id(),
    sa.Column("run_id", UUID(as_uuid=True),
              sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), nullable=False),
    _org(),
    sa.Column("parent_id", UUID(as_uuid=True), nullable=True),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("spec", JSONB, nullable=False),
    sa.Column("input", JSONB, nullable=True),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False, server_default="0"),
    sa.Column("output", JSONB, nullable=True),
    sa.Column("output_size", sa.Integer, nullable=True),
    sa.Column("preview", sa.Text, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("wake_at", sa.DateTime(timezone=True), nullable=True),
    _created(),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    # migration 0015: an agent step's usage and cost, a failed step's typed code
    sa.Column("usage", JSONB, nullable=True),
    sa.Column("cost_usd", sa.Numeric(18, 6), nullable=False, server_default="0"),
    sa.Column("error_code", sa.Text, nullable=True),
    sa.UniqueConstraint("run_id", "path", name="uq_workflow_steps_path"),
    sa.CheckConstraint(
        "status in ('pending','queued','running','waiting','done','failed','skipped',"
        "'cancelled')", name="ck_workflow_steps_status"),
    sa.Index("ix_workflow_steps_parent", "parent_id", "status", "position"),
)

# The hidden thread of each agent step (store/workflow_threads.py): one per step, whatever
# its attempts; a run's spend is its threads' turns' spend.
workflow_threads = sa.Table(
    "workflow_threads",
    metadata,
    sa.Column("step_id", UUID(as_uuid=True),
              sa.ForeignKey("workflow_steps.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("run_id", UUID(as_uuid=True),
              sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("org_id", UUID(as_uuid=True), nullable=False),
    sa.Column("thread_id", UUID(as_uuid=True),
              sa.ForeignKey("threads.id", ondelete="CASCADE"), nullable=False),
    sa.UniqueConstraint("thread_id", name="uq_workflow_threads_thread"),
    sa.Index("ix_workflow_threads_run", "run_id"),
)

workflow_attempts = sa.Table(
    "workflow_attempts",
    metadata,
    sa.Column("step_id", UUID(as_uuid=True),
              sa.ForeignKey("workflow_steps.id", ondelete="CASCADE"), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("org_id", UUID(as_uuid=True), nullable=False),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("outcome", sa.Text, nullable=True),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint("step_id", "attempt"),
)

workflow_events = sa.Table(
    "workflow_events",
    metadata,
    sa.Column("run_id", UUID(as_uuid=True),
              sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("org_id", UUID(as_uuid=True), nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("data", JSONB, nullable=False),
    _created(),
    sa.PrimaryKeyConstraint("run_id", "seq"),
)

# Where a run came from (store/run_origins.py): a schedule's tick, or a conversation's tool
# call, which is told the run's result once when it ends.
run_origins = sa.Table(
    "run_origins",
    metadata,
    sa.Column("run_id", UUID(as_uuid=True),
              sa.ForeignKey("workflow_runs.id", ondelete="CASCADE"), primary_key=True),
    _org(),
    sa.Column("schedule_id", UUID(as_uuid=True),
              sa.ForeignKey("schedules.id", ondelete="SET NULL"), nullable=True),
    sa.Column("tick", sa.DateTime(timezone=True), nullable=True),
    sa.Column("thread_id", UUID(as_uuid=True),
              sa.ForeignKey("threads.id", ondelete="SET NULL"), nullable=True),
    sa.Column("tool_use_id", sa.Text, nullable=True),
    sa.Column("budget", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    _created(),
    sa.Index("ix_run_origins_schedule", "schedule_id",
             postgresql_where=sa.text("schedule_id IS NOT NULL")),
    sa.Index("ix_run_origins_thread", "thread_id",
             postgresql_where=sa.text("thread_id IS NOT NULL")),
    sa.Index("uq_run_origins_call", "thread_id", "tool_use_id", unique=True,
             postgresql_where=sa.text("tool_use_id IS NOT NULL")),
)


# Pending actions (store/approvals.py): what a person decides once — a held tool call
# (`kind='tool'`, its turn and tool_use id; no turn when held outside one), later a workflow
# gate. The row is also the decision's audit: who, when, the arguments before and after.
pending_actions = sa.Table(
    "pending_actions",
    metadata,
    _id(),
    _org(),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default="pending"),
    sa.Column("thread_id", UUID(as_uuid=True), nullable=True),
    sa.Column("turn_id", UUID(as_uuid=True), nullable=True),
    sa.Column("tool_use_id", sa.Text, nullable=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("arguments", JSONB, nullable=False),
    sa.Column("subject", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("decided_arguments", JSONB, nullable=True),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("decided_by", UUID(as_uuid=True), nullable=True),
    sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("result", JSONB, nullable=True),
    sa.Column("executed_at", sa.DateTime(timezone=True), nullable=True),
    _created(),
    sa.CheckConstraint("status in ('pending','approved','denied','expired')",
                       name="ck_pending_actions_status"),
    sa.Index("ix_pending_actions_org", "org_id", "status", "created_at", "id"),
    sa.Index("uq_pending_actions_call", "turn_id", "tool_use_id", unique=True,
             postgresql_where=sa.text("turn_id IS NOT NULL")),
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

# Analyses (ator.analyses, store/analyses.py): an org's kinds as data, every stored analysis
# (the cache is (org, kind, target, input_hash) among the cacheable ones), per-day figures
# per (org, kind), eval runs (org NULL for a kind defined in code).
analysis_kinds = sa.Table(
    "analysis_kinds",
    metadata,
    _id(),
    _org(),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("spec", JSONB, nullable=False),
    _created(),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.UniqueConstraint("org_id", "name", name="uq_analysis_kinds_org_name"),
)

analyses = sa.Table(
    "analyses",
    metadata,
    _id(),
    _org_hot(),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("kind_version", sa.Integer, nullable=False),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("input_hash", sa.Text, nullable=False),
    sa.Column("cacheable", sa.Boolean, nullable=False),
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("output", JSONB, nullable=False),
    sa.Column("verdict", sa.Text, nullable=False),
    sa.Column("problems", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
    sa.Column("cost_usd", sa.Numeric(14, 6), nullable=False, server_default="0"),
    sa.Column("spent_usd", sa.Numeric(14, 6), nullable=False, server_default="0"),
    sa.Column("origin", sa.Text, nullable=False),
    sa.Column("request_id", sa.Text, nullable=True),
    _created(),
    sa.Index("ix_analyses_cache", "org_id", "kind", "target", "input_hash",
             postgresql_where=sa.text("cacheable")),
    sa.Index("ix_analyses_org_kind", "org_id", "kind", "created_at"),
)

analysis_daily = sa.Table(
    "analysis_daily",
    metadata,
    sa.Column("org_id", UUID(as_uuid=True), nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("day", sa.Date, nullable=False),
    sa.Column("shard", sa.SmallInteger, nullable=False, server_default="0"),
    sa.Column("runs", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("model_calls", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cache_hits", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("fallbacks", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cost_usd", sa.Numeric(14, 6), nullable=False, server_default="0"),
    sa.PrimaryKeyConstraint("org_id", "kind", "day", "shard", name="pk_analysis_daily"),
)

eval_runs = sa.Table(
    "eval_runs",
    metadata,
    _id(),
    sa.Column("org_id", UUID(as_uuid=True), nullable=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("kind_version", sa.Integer, nullable=False),
    sa.Column("setup", sa.Text, nullable=False),
    sa.Column("cases", sa.Integer, nullable=False),
    sa.Column("passed", sa.Integer, nullable=False),
    sa.Column("results", JSONB, nullable=False),
    _created(),
    sa.Index("ix_eval_runs_kind", "kind", "created_at"),
)


# Knowledge (ator.knowledge, store/knowledge.py): an org's documents, every version's text,
# the current version's chunks (the only ones search reads), a generation per org (bumped by
# every write: a replica's BM25 index is current while it is) and the query log.
knowledge_documents = sa.Table(
    "knowledge_documents",
    metadata,
    _id(),
    _org(),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("content_type", sa.Text, nullable=False),
    sa.Column("current_version", sa.Integer, nullable=False),
    _created(),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.CheckConstraint("content_type in ('text/plain','text/markdown')",
                       name="ck_knowledge_documents_type"),
    sa.Index("ix_knowledge_documents_org", "org_id", "created_at", "id"),
)

knowledge_versions = sa.Table(
    "knowledge_versions",
    metadata,
    sa.Column("document_id", UUID(as_uuid=True),
              sa.ForeignKey("knowledge_documents.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    _org_hot(),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("sha256", sa.Text, nullable=False),
    sa.Column("created_by", UUID(as_uuid=True), nullable=True),
    _created(),
)

knowledge_chunks = sa.Table(
    "knowledge_chunks",
    metadata,
    _id(),
    _org_hot(),
    sa.Column("document_id", UUID(as_uuid=True),
              sa.ForeignKey("knowledge_documents.id", ondelete="CASCADE"), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("section", sa.Text, nullable=False, server_default=""),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("text_sha256", sa.Text, nullable=False),
    sa.Index("ix_knowledge_chunks_org", "org_id"),
    sa.Index("ix_knowledge_chunks_document", "document_id", "seq"),
)

knowledge_generations = sa.Table(
    "knowledge_generations",
    metadata,
    sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("generation", sa.BigInteger, nullable=False),
)

knowledge_queries = sa.Table(
    "knowledge_queries",
    metadata,
    _id(),
    _org(),
    sa.Column("query", sa.Text, nullable=False),
    sa.Column("origin", sa.Text, nullable=False),
    sa.Column("thread_id", UUID(as_uuid=True), nullable=True),
    sa.Column("sources", JSONB, nullable=False),
    sa.Column("answered", sa.Boolean, nullable=False),
    _created(),
    sa.Index("ix_knowledge_queries_org", "org_id", "answered", "created_at"),
)

#: Tables the knowledge migration makes only where the server has pgvector (their `vector`
#: columns have no SQLAlchemy type here): not mirrored, and left out of the comparison.
OPTIONAL_TABLES = frozenset({"knowledge_embeddings", "knowledge_vectors"})


# Retention (ator.retention, store/retention.py; migration 0022). What a purged thread's
# model calls billed, summed per hour (read beside model_calls by store/usage.py, so a purge
# changes no total), and the audit of every purge: what went, under which cutoff, how many
# rows of each table.
usage_purged = sa.Table(
    "usage_purged",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    _org_hot(),
    sa.Column("thread_id", UUID(as_uuid=True), nullable=False),
    sa.Column("setup_id", UUID(as_uuid=True), nullable=True),
    sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
    sa.Column("calls", sa.BigInteger, nullable=False),
    sa.Column("input_tokens", sa.BigInteger, nullable=False),
    sa.Column("output_tokens", sa.BigInteger, nullable=False),
    sa.Column("cache_read_tokens", sa.BigInteger, nullable=False),
    sa.Column("cache_write_tokens", sa.BigInteger, nullable=False),
    sa.Column("cost_usd", sa.Numeric(18, 6), nullable=False),
    sa.Column("all_priced", sa.Boolean, nullable=False),
    sa.Index("ix_usage_purged_org_hour", "org_id", "hour"),
)

purges = sa.Table(
    "purges",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    _org(),
    sa.Column("what", sa.Text, nullable=False),
    sa.Column("subject_id", UUID(as_uuid=True), nullable=True),
    sa.Column("cutoff", sa.DateTime(timezone=True), nullable=False),
    sa.Column("rows", JSONB, nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.Index("ix_purges_org_at", "org_id", "at", "id"),
)

# Single sign-on (ator.sso, store/sso.py; migration 0022): an org's OIDC client (its secret
# encrypted under the master key), the logins in flight (state hash, PKCE verifier, nonce;
# used once), and the grant behind each SSO key (the refresh token, encrypted).
sso_configs = sa.Table(
    "sso_configs",
    metadata,
    sa.Column("org_id", UUID(as_uuid=True), sa.ForeignKey("orgs.id", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("issuer", sa.Text, nullable=False),
    sa.Column("client_id", sa.Text, nullable=False),
    sa.Column("secret_nonce", sa.LargeBinary, nullable=True),
    sa.Column("secret_ct", sa.LargeBinary, nullable=True),
    sa.Column("email_domain", sa.Text, nullable=True),
    sa.Column("email_claim", sa.Text, nullable=False, server_default="email"),
    sa.Column("role_claim", sa.Text, nullable=True),
    sa.Column("role_map", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("default_role", sa.Text, nullable=False, server_default="member"),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
    sa.CheckConstraint("default_role in ('admin','member','viewer')", name="ck_sso_configs_role"),
)

sso_logins = sa.Table(
    "sso_logins",
    metadata,
    sa.Column("state_hash", sa.Text, primary_key=True),
    _org(),
    sa.Column("verifier", sa.Text, nullable=False),
    sa.Column("nonce", sa.Text, nullable=False),
    _created(),
    sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
)

sso_grants = sa.Table(
    "sso_grants",
    metadata,
    sa.Column("key_id", UUID(as_uuid=True), sa.ForeignKey("api_keys.id", ondelete="CASCADE"),
              primary_key=True),
    _org(),
    sa.Column("subject", sa.Text, nullable=False),
    sa.Column("refresh_nonce", sa.LargeBinary, nullable=True),
    sa.Column("refresh_ct", sa.LargeBinary, nullable=True),
    sa.Column("refreshed_at", sa.DateTime(timezone=True), nullable=False, server_default=_now),
)
