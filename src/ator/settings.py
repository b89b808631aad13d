"""Process settings (layer: bottom; imports pydantic only).

Built once at the edge (CLI, app lifespan, tests) from `ATOR_*` environment variables and
passed down through constructors. Nothing below the edge reads `os.environ`.

Structured settings are typed objects parsed from JSON in their variable, e.g.
`ATOR_CAP_CEILINGS='{"max_steps": 100}'` or `ATOR_PRICES='{"my-model": {"input": "1",
"output": "2"}}'`; `ATOR_PRICES_FILE` names a JSON file of the same shape, read here, once.
"""

from __future__ import annotations

import ipaddress
import json
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["CapCeilings", "PriceSetting", "Settings"]


def _default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("ator", appauthor=False))


class CapCeilings(BaseModel):
    """The operator's upper bound for every per-turn cap a setup may set (agent/caps.py).

    A setup asking for more than its ceiling is refused when it is written, with the cap's
    name and ceiling. One field per cap, so a cap without a ceiling is a test failure."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_steps: int = Field(200, ge=1)
    max_turn_tokens: int = Field(10_000_000, ge=1)
    turn_timeout: float = Field(3600.0, gt=0, allow_inf_nan=False)
    stall_timeout: float = Field(600.0, gt=0, allow_inf_nan=False)
    tool_timeout: float = Field(1800.0, gt=0, allow_inf_nan=False)
    tool_result_chars: int = Field(1_000_000, ge=1)
    tool_description_chars: int = Field(100_000, ge=1)
    max_output_tokens: int = Field(128_000, ge=1)
    provider_retries: int = Field(10, ge=0)
    persist_calls_after: float = Field(60.0, gt=0, allow_inf_nan=False)
    subagent_depth: int = Field(10, ge=0)
    subagent_width: int = Field(100, ge=0)
    subagent_live: int = Field(500, ge=0)
    tree_tokens: int = Field(100_000_000, ge=0)
    tree_usd: float = Field(10_000.0, ge=0, allow_inf_nan=False)


class PriceSetting(BaseModel):
    """An operator's price for one model id (exact match), USD per million tokens. Cache
    prices left out cost the input price: an override never grants an unknown discount."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: Decimal = Field(ge=0, allow_inf_nan=False)
    output: Decimal = Field(ge=0, allow_inf_nan=False)
    cache_read: Decimal | None = Field(default=None, ge=0, allow_inf_nan=False)
    cache_write: Decimal | None = Field(default=None, ge=0, allow_inf_nan=False)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ATOR_", frozen=True, extra="ignore")

    # Storage: external PostgreSQL by URL, else an embedded server in data_dir/pg.
    database_url: str | None = None
    data_dir: Path = Field(default_factory=_default_data_dir)
    db_pool_size: int = 20

    # Coordination: unset = in-process (one replica); redis://… for many replicas.
    redis_url: str | None = None
    # Namespace of this deployment's keys and channels on a shared Redis.
    redis_prefix: str = "ator:"
    # Bounded Redis pools, isolated so request traffic cannot starve coordination: leases,
    # heartbeats, stops and readiness (coordination) vs rate limits and busy lookups
    # (requests). A caller waits at most redis_pool_timeout seconds for a connection.
    # Unset, each is max(32, max_turns_in_flight // 4): a burst of turns starting at once
    # takes a lease each, and requests as many (a pool of 32 timed out at 1,000 turns).
    redis_pool_size: int = Field(default=32, ge=2)
    redis_request_pool_size: int = Field(default=32, ge=1)
    redis_pool_timeout: float = Field(default=2.0, gt=0)

    # AES-256-GCM master key, base64 of 32 bytes. Unset: a key file is created in data_dir
    # (fine for one machine; set it explicitly for more than one).
    master_key: SecretStr | None = None

    # Engine timing.
    lease_ttl: float = 15.0
    reaper_interval: float = 5.0
    owner_id: str | None = None  # replica identity; default hostname:pid
    # Admission: turns this process runs at once. Threads woken beyond it wait durably in
    # the mailbox (only their ids are queued here) and start in wake order as slots free.
    max_turns_in_flight: int = Field(default=1000, ge=1)
    # Python GC thresholds applied by `ator serve` once started, after freezing what startup
    # made (obs/gctune.py); JSON, e.g. [700, 10, 10]; [] leaves Python's defaults.
    gc_thresholds: tuple[int, ...] = (100_000, 50, 1000)
    # Requests first (ator/foreground.py): a turn about to start while this process is
    # answering requests that hand it work (POSTs under /v1/threads) waits for them to be
    # answered, at most this many seconds; 0 never waits.
    requests_first_wait: float = Field(default=0.6, ge=0, le=10)
    # Event-loop lag (seconds) above which /readyz reports the process not ready.
    max_loop_lag: float = Field(default=2.0, gt=0)

    # Provider credentials known to the process (setups may reference org secrets instead).
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None
    # May a setup name its own provider endpoint (config.base_url / config.headers)? The
    # egress guard and the credential rule apply when it may; false refuses such setups.
    tenant_endpoints: bool = True
    # Ceiling on a setup's config.timeout (seconds per provider request).
    max_provider_timeout: float = Field(default=600.0, gt=0)
    # Where a setup's config.model_path (provider "local") may point; unset: nowhere.
    local_models_dir: Path | None = None

    # Context (agent/compaction.py). Before every model call the request must fit
    # min(model window, transport body limit) x compaction_threshold, else the oldest part of
    # the conversation is summarized. Windows (tokens) by model-id prefix override the
    # built-in table, e.g. {"my-llama": 32768}; body limits (bytes) are per process endpoint
    # (a setup with its own base_url sets config.body_limit for its proxy).
    model_windows: dict[str, Annotated[int, Field(ge=1024)]] = Field(default_factory=dict)
    anthropic_body_limit: int = Field(default=32 * 1024 * 1024, ge=4096)
    openai_body_limit: int = Field(default=32 * 1024 * 1024, ge=4096)
    compaction_threshold: float = Field(default=0.8, gt=0.1, le=1.0)

    # Built provider clients kept for reuse (LRU; an evicted idle client is closed).
    provider_cache_size: int = Field(default=64, ge=1)

    # CLI runtimes (providers/cli/): the executables (unset: `claude` / `codex` on PATH),
    # the operator's codex home (its auth.json is linked into ator's vanilla CODEX_HOME;
    # unset: ~/.codex), where org workspaces live (unset: data_dir/workspaces), variables
    # given to every CLI child besides PATH/HOME/locale (a proxy's base URL, the CLI's own
    # key; never ATOR_*), the longest JSON line read, seconds a CLI may take to exit after
    # its result, seconds between SIGTERM and SIGKILL of its process group, and the
    # CLI's own backstops when a setup names none. `codex_config` is the operator's TOML
    # added to ator's vanilla codex config (a model provider behind a proxy, its base URL):
    # codex reads no base URL from its environment, only from its config.
    claude_cli_path: Path | None = None
    codex_cli_path: Path | None = None
    codex_home: Path | None = None
    codex_config: str = Field(default="", max_length=64 * 1024)
    cli_workspaces_dir: Path | None = None
    cli_env: dict[str, str] = Field(default_factory=dict)
    cli_line_limit: int = Field(default=8 * 1024 * 1024, ge=64 * 1024)
    cli_after_result: float = Field(default=5.0, gt=0)
    cli_kill_grace: float = Field(default=0.5, gt=0, le=10)
    cli_max_turns: int = Field(default=100, ge=1)
    cli_max_budget_usd: float = Field(default=10.0, gt=0)

    @field_validator("cli_env")
    @classmethod
    def _no_ator_names(cls, value: dict[str, str]) -> dict[str, str]:
        named = sorted(k for k in value if k.upper().startswith("ATOR_"))
        if named:
            raise ValueError(f"ATOR_* variables never reach a CLI: {', '.join(named)}")
        return value

    # Egress (net/): every outbound connection is refused to loopback, private, link-local and
    # reserved addresses, and needs https, unless its host or address is allowlisted here:
    # comma-separated host names and IPs/CIDRs, e.g. `127.0.0.1,llm.internal,10.0.0.0/8`.
    egress_allow: Annotated[tuple[str, ...], NoDecode] = ()
    egress_connect_timeout: float = Field(default=10.0, gt=0)
    egress_read_timeout: float = Field(default=600.0, gt=0)
    egress_max_response_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    egress_max_redirects: int = Field(default=5, ge=0)

    # MCP (ator.mcp): upstream sessions are pooled per (org, server, conversation root).
    mcp_session_idle_ttl: float = Field(default=300.0, gt=0)
    mcp_max_sessions: int = Field(default=500, ge=1)
    mcp_max_sessions_per_org: int = Field(default=50, ge=1)
    mcp_description_chars: int = Field(default=2_000, ge=50)
    # How long a replica reuses an org's MCP server list and a setup's tool policy at turn
    # start (writes through the same replica are seen at once).
    mcp_catalog_ttl: float = Field(default=5.0, ge=0)
    # Above this many MCP tools in a turn, mount tool_search instead of them all.
    mcp_tool_search_threshold: int = Field(default=40, ge=0)
    # stdio MCP servers (a process on this machine) exist only here, never from a tenant:
    # name -> command line, offered to every org, e.g. {"everything": ["npx", "-y", "..."]}.
    mcp_stdio_servers: dict[str, list[str]] = Field(default_factory=dict)

    # Approvals (engine/approvals.py): how long a held tool call waits for a person's
    # decision before it is denied by timeout, unless its setup's tool policy says
    # (`approve_timeout`).
    approval_timeout: float = Field(default=86_400.0, gt=0)

    # Money. Prices come from the genai-prices library; these override or add models by
    # exact id (ATOR_PRICES wins over ATOR_PRICES_FILE).
    budget_fail_closed: bool = True
    prices: dict[str, PriceSetting] = Field(default_factory=dict)
    prices_file: Path | None = None
    # Upper bounds on every cap a setup may set.
    cap_ceilings: CapCeilings = Field(default_factory=CapCeilings)

    # HTTP API.
    host: str = "127.0.0.1"
    port: int = 8080
    rate_limit_per_minute: int = 600  # per (org, user), global across replicas
    # Proxies whose X-Forwarded-For / X-Forwarded-Proto are believed (comma-separated IPs and
    # CIDRs, or "*" when nothing but the proxy can reach ator). Empty: those headers are
    # ignored and the client is the connection's peer (api.proxies).
    trusted_proxies: Annotated[tuple[str, ...], NoDecode] = ()
    # Request bodies larger than this are refused (413) before routing, parsing and auth.
    # The largest legitimate request is a 100,000-character message (up to ~600 kB as JSON).
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    # Concurrent long-polls (GET …/events?wait=) per user and per org, counted per process.
    max_waits_per_user: int = Field(default=20, ge=1)
    max_waits_per_org: int = Field(default=200, ge=1)
    # The web console's built files (default: the ones shipped in the package).
    web_dir: Path | None = None
    # Console sessions (a key exchanged for a cookie at POST /v1/sessions) last this long.
    session_ttl: float = Field(default=12 * 3600.0, gt=0, le=90 * 86400.0)
    # Socket gateway (per replica): connections per user and org, threads one socket may
    # follow at once, and the bytes queued to one socket before it is sent no more persisted
    # frames and made to wait (a socket whose queue has not drained for socket_slow_timeout
    # seconds is disconnected and resumes from the database with after_seq).
    max_sockets_per_user: int = Field(default=20, ge=1)
    max_sockets_per_org: int = Field(default=2000, ge=1)
    max_socket_rooms: int = Field(default=32, ge=1)
    socket_outbox_bytes: int = Field(default=4 * 1024 * 1024, ge=64 * 1024)
    socket_slow_timeout: float = Field(default=10.0, gt=0)
    socket_recheck_interval: float = Field(default=30.0, gt=0)  # revoked keys lose sockets
    # /metrics answers only with this bearer token; unset, /metrics is 404.
    metrics_token: SecretStr | None = None
    # With no API key in the database yet, serve creates an operator admin key: this one if
    # set (automation, tests), else a random one printed once.
    bootstrap_key: SecretStr | None = None

    # Logs: JSON when not on a terminal, unless forced.
    log_json: bool | None = None
    log_level: str = "INFO"
    # Traces (ator.obs.tracing): OTLP/HTTP to this collector URL (e.g.
    # http://collector:4318/v1/traces); none: tracing is off and costs nothing.
    otel_endpoint: str | None = None
    otel_service_name: str = "ator"

    # Jobs and schedules (ator.jobs). `ator worker` runs them; `ator serve` runs them too
    # unless run_jobs is false (or `--no-jobs`). job_concurrency: handlers at once per
    # process; job_batch: jobs per claim statement; job_lease_ttl: a held job is rescued
    # (retried) this long after its worker stopped heartbeating; job_poll_interval: the
    # longest a worker waits without a NOTIFY; job_grace: on shutdown, running handlers get
    # this long to finish before their jobs are handed back; done and dead jobs are pruned
    # after job_keep_done / job_keep_dead seconds; schedule_interval: how often due
    # schedules are looked for.
    run_jobs: bool = True
    job_concurrency: int = Field(default=50, ge=1)
    job_batch: int = Field(default=100, ge=1, le=10_000)
    job_lease_ttl: float = Field(default=30.0, gt=0)
    job_poll_interval: float = Field(default=1.0, gt=0)
    job_grace: float = Field(default=10.0, ge=0)
    job_keep_done: float = Field(default=86_400.0, ge=0)
    job_keep_dead: float = Field(default=14 * 86_400.0, ge=0)
    schedule_interval: float = Field(default=1.0, gt=0)

    # Retention (ator.retention): the operator's defaults for every org, in days, and the
    # bounds an org's own policy must stay within. trash: deleted threads and archived
    # setups are purged this long after; mailbox: consumed mailbox items; events: the event
    # log and inspector records of threads idle this long (0: kept); runs: finished workflow
    # runs. retention_cron (UTC) is when each org's purge runs; one statement removes at most
    # retention_batch rows under retention_statement_timeout seconds.
    retention_trash_days: int = Field(default=30, ge=1)
    retention_mailbox_days: int = Field(default=7, ge=1)
    retention_events_days: int = Field(default=0, ge=0)
    retention_runs_days: int = Field(default=90, ge=1)
    retention_min_days: int = Field(default=1, ge=1)
    retention_max_days: int = Field(default=3650, ge=1)
    retention_cron: str = "17 3 * * *"
    retention_batch: int = Field(default=1000, ge=1, le=100_000)
    retention_statement_timeout: float = Field(default=5.0, gt=0)

    # Voice (ator.voice): a reply is spoken by an OpenAI-compatible speech API when
    # speech_url is set (e.g. https://api.openai.com/v1; POST {speech_url}/audio/speech),
    # through the egress guard, else by the local engine (Debian's espeak-ng). At most
    # speech_max_chars of a reply are spoken.
    speech_url: str | None = None
    speech_api_key: SecretStr | None = None
    speech_model: str = "gpt-4o-mini-tts"
    speech_voice: str = "alloy"
    speech_local_binary: str = "espeak-ng"
    speech_local_voice: str = "en"
    speech_max_chars: int = Field(default=4096, ge=1, le=100_000)

    # Single sign-on (ator.sso): a console session made by an SSO login lasts
    # sso_session_ttl seconds; the console then refreshes it, which asks the identity
    # provider again (a person it disabled is refused then).
    sso_session_ttl: float = Field(default=900.0, gt=0)

    # Webhooks (ator.webhooks). Outbound deliveries are retried after each of
    # webhook_retry_delays seconds (comma-separated; jitter ±10 %; a receiver's Retry-After
    # wins when longer), so attempts = len + 1; webhook_timeout per attempt;
    # webhook_response_excerpt: characters of a receiver's answer kept in the delivery log.
    # Inbound (/v1/hooks/{id}): bodies above webhook_inbound_max_bytes are a 413; a
    # webhook-timestamp further than webhook_tolerance seconds from now is refused.
    webhook_retry_delays: Annotated[tuple[float, ...], NoDecode] = (
        5.0, 300.0, 1800.0, 7200.0, 18_000.0, 36_000.0, 50_400.0, 72_000.0, 86_400.0)
    webhook_timeout: float = Field(default=15.0, gt=0, le=60)
    webhook_response_excerpt: int = Field(default=1024, ge=0, le=65_536)
    webhook_inbound_max_bytes: int = Field(default=256 * 1024, ge=1024)
    webhook_tolerance: float = Field(default=300.0, gt=0)
    # An endpoint whose every attempt failed for this long (seconds; 5 days) is disabled.
    webhook_disable_after: float = Field(default=5 * 86_400.0, ge=0)

    # Knowledge (ator.knowledge): org documents and search_docs. Embeddings come from
    # wordllama's model inside its wheel ("wordllama"), an OpenAI-compatible endpoint
    # ("endpoint": knowledge_embeddings_url + _model, asked for 256 dimensions, through the
    # egress guard, key from knowledge_embeddings_api_key) or nowhere ("none": BM25 alone,
    # as on a database without pgvector). Chunks hold at most knowledge_chunk_chars; a
    # search returns at most knowledge_snippets snippets of knowledge_snippet_chars; a vector
    # hit below knowledge_min_similarity (cosine) is no answer; each replica keeps the BM25
    # index of knowledge_index_cache orgs.
    knowledge_embedder: Literal["wordllama", "endpoint", "none"] = "wordllama"
    knowledge_embeddings_url: str | None = None
    knowledge_embeddings_model: str = "text-embedding-3-small"
    knowledge_embeddings_api_key: SecretStr | None = None
    knowledge_document_chars: int = Field(default=200_000, ge=1000, le=2_000_000)
    knowledge_chunk_chars: int = Field(default=1000, ge=200, le=20_000)
    knowledge_snippets: int = Field(default=5, ge=1, le=50)
    knowledge_snippet_chars: int = Field(default=1500, ge=100, le=20_000)
    knowledge_min_similarity: float = Field(default=0.35, ge=-1.0, le=1.0)
    knowledge_index_cache: int = Field(default=64, ge=1)

    @field_validator("webhook_retry_delays", mode="before")
    @classmethod
    def _split_delays(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(float(part) for part in value.split(",") if part.strip())
        return value

    # The MCP gateway (/mcp, ator.gateway). `Host` values it answers (e.g. "ator.example.com",
    # "ator.example.com:*") and, with those set, the `Origin`s it accepts from browsers.
    # Empty: no Host/Origin check (the bearer key is the gate: a web page cannot send it).
    gateway_allowed_hosts: Annotated[tuple[str, ...], NoDecode] = ()
    gateway_allowed_origins: Annotated[tuple[str, ...], NoDecode] = ()
    # Handshake-era sessions (Mcp-Session-Id) idle longer than this are closed.
    gateway_session_idle: float = Field(default=1800.0, gt=0)
    # A published workflow called as a tool answers its output if its run ends within this
    # many seconds, else its run id and status.
    gateway_workflow_wait: float = Field(default=5.0, ge=0, le=60)

    # Workflows (ator.workflows). Every run has a step and a wall-clock budget: a recipe's
    # own (`budget.max_steps`, `budget.wall_clock_s`) or these defaults, never above these
    # ceilings (a recipe asking for more is refused at publish). workflow_expr_timeout_ms
    # and workflow_expr_depth bound each JSONata evaluation; workflow_value_bytes caps one
    # step's output (and a map's list); workflow_lease_ttl is the reconciler's lease on a run.
    workflow_max_steps: int = Field(default=1_000, ge=1)
    workflow_max_steps_ceiling: int = Field(default=10_000, ge=1)
    workflow_wall_clock: float = Field(default=3_600.0, gt=0)
    workflow_wall_clock_ceiling: float = Field(default=86_400.0, gt=0)
    workflow_expr_timeout_ms: int = Field(default=1_000, ge=1)
    workflow_expr_depth: int = Field(default=200, ge=1)
    workflow_value_bytes: int = Field(default=4_000_000, ge=1_000)
    workflow_lease_ttl: float = Field(default=30.0, gt=0)
    # A run paused longer than this is cancelled (`cancel_reason: pause_expired`).
    workflow_pause_ttl: float = Field(default=7 * 86_400.0, gt=0)
    # A run's money (`budget.usd`, checked before every agent call) and its no-progress
    # close (`budget.idle_s`: no step finished for this long ends it `failed`/`no_progress`),
    # each a default and a ceiling like the step and wall-clock budgets.
    workflow_usd: float = Field(default=5.0, gt=0)
    workflow_usd_ceiling: float = Field(default=100.0, gt=0)
    workflow_idle: float = Field(default=1_800.0, gt=0)
    workflow_idle_ceiling: float = Field(default=86_400.0, gt=0)
    # How deep `workflow` steps may nest sub-runs (a top-level run is depth 0); the ceiling
    # is fixed: no deployment nests deeper.
    workflow_max_depth: int = Field(default=3, ge=0, le=10)

    @field_validator("prices", "cap_ceilings", "model_windows", "cli_env", mode="before")
    @classmethod
    def _json_text(cls, value: Any) -> Any:
        """JSON text given in code (the environment's is decoded by pydantic-settings)."""
        return json.loads(value) if isinstance(value, str) else value

    @model_validator(mode="before")
    @classmethod
    def _merge_prices_file(cls, data: Any) -> Any:
        """Read ATOR_PRICES_FILE once, here at the edge; entries in ATOR_PRICES win."""
        if not isinstance(data, dict) or not data.get("prices_file"):
            return data
        path = Path(data["prices_file"])
        try:
            loaded = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"ATOR_PRICES_FILE {str(path)!r} is not readable JSON: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ValueError(f"ATOR_PRICES_FILE {str(path)!r} must hold a JSON object")
        inline = data.get("prices") or {}
        if isinstance(inline, str):
            inline = json.loads(inline)
        return {**data, "prices": {**loaded, **inline}}

    @model_validator(mode="before")
    @classmethod
    def _redis_pools_follow_the_load(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        try:
            turns = int(data.get("max_turns_in_flight", 1000))
        except (TypeError, ValueError):
            return data  # the field's own validation says what is wrong
        for name in ("redis_pool_size", "redis_request_pool_size"):
            if data.get(name) is None:
                data[name] = max(32, turns // 4)
        return data

    @field_validator("gc_thresholds")
    @classmethod
    def _three_thresholds(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if len(value) not in (0, 3) or any(v < 0 for v in value):
            raise ValueError("three non-negative numbers (generations 0, 1, 2), or []")
        return value

    @field_validator("egress_allow", "gateway_allowed_hosts", "gateway_allowed_origins",
                     mode="before")
    @classmethod
    def _split_allow(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _proxy_networks(cls, value: Any) -> Any:
        parts = [p.strip() for p in value.split(",")] if isinstance(value, str) else value
        if not isinstance(parts, list | tuple):
            return value
        out = tuple(p for p in parts if isinstance(p, str) and p)
        for part in out:
            if part != "*":
                try:
                    ipaddress.ip_network(part, strict=False)
                except ValueError:
                    raise ValueError(f"{part!r} is not an IP address or CIDR network (or '*')"
                                     ) from None
        return out
