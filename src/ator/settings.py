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
    # May a setup name its own provider endpoint (config.base_url / config.headers)? The
    # egress guard and the credential rule apply when it may; false refuses such setups.
    tenant_endpoints: bool = True
    # Ceiling on a setup's config.timeout (seconds per provider request).
    max_provider_timeout: float = Field(default=600.0, gt=0)
    # Where a setup's config.model_path (provider "local") may point; unset: nowhere.
    local_models_dir: Path | None = None

    # Money.
    budget_fail_closed: bool = True

    # HTTP API.
    host: str = "127.0.0.1"
    port: int = 8080
    rate_limit_per_minute: int = 600  # per (org, user), global across replicas
    metrics_token: SecretStr | None = None
    # With no API key in the database yet, serve creates an operator admin key: this one if
    # set (automation, tests), else a random one printed once.
    bootstrap_key: SecretStr | None = None  # /metrics requires it as a bearer token when set

    # Logs: JSON when not on a terminal, unless forced.
    log_json: bool | None = None
    log_level: str = "INFO"
