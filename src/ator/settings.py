"""Process settings (layer: bottom; imports pydantic only).

Built once at the edge (CLI, app lifespan, tests) from `ATOR_*` environment variables and
passed down through constructors. Nothing below the edge reads `os.environ`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import platformdirs
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

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

    # A tenant's setup may name its own base_url/headers; false refuses them at turn time.
    tenant_endpoints: bool = True
    # Built provider clients kept for reuse (LRU; an evicted idle client is closed).
    provider_cache_size: int = Field(default=64, ge=1)

    # Egress (net/): every outbound connection is refused to loopback, private, link-local and
    # reserved addresses, and needs https, unless its host or address is allowlisted here:
    # comma-separated host names and IPs/CIDRs, e.g. `127.0.0.1,llm.internal,10.0.0.0/8`.
    egress_allow: Annotated[tuple[str, ...], NoDecode] = ()
    egress_connect_timeout: float = Field(default=10.0, gt=0)
    egress_read_timeout: float = Field(default=600.0, gt=0)
    egress_max_response_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    egress_max_redirects: int = Field(default=5, ge=0)

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

    @field_validator("egress_allow", mode="before")
    @classmethod
    def _split_allow(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value
