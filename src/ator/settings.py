"""Process settings (layer: bottom; imports pydantic only).

Built once at the edge (CLI, app lifespan, tests) from `ATOR_*` environment variables and
passed down through constructors. Nothing below the edge reads `os.environ`.
"""

from __future__ import annotations

from pathlib import Path

import platformdirs
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings"]


def _default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("ator", appauthor=False))


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

    # Provider credentials known to the process (setups may reference org secrets instead).
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None

    # Money.
    budget_fail_closed: bool = True

    # HTTP API.
    host: str = "127.0.0.1"
    port: int = 8080
    rate_limit_per_minute: int = 600  # per (org, user), global across replicas
    # Request bodies larger than this are refused (413) before routing, parsing and auth.
    # The largest legitimate request is a 100,000-character message (up to ~600 kB as JSON).
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    # Concurrent long-polls (GET …/events?wait=) per user and per org, counted per process.
    max_waits_per_user: int = Field(default=20, ge=1)
    max_waits_per_org: int = Field(default=200, ge=1)
    # /metrics answers only with this bearer token; unset, /metrics is 404.
    metrics_token: SecretStr | None = None
    # With no API key in the database yet, serve creates an operator admin key: this one if
    # set (automation, tests), else a random one printed once.
    bootstrap_key: SecretStr | None = None

    # Logs: JSON when not on a terminal, unless forced.
    log_json: bool | None = None
    log_level: str = "INFO"
