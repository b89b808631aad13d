"""The typed provider config of a setup, and the rule every write of it passes (layer:
providers; imports pydantic, ator.errors, ator.security.*, ator.settings).

A setup's `config` is tenant input. `parse_provider_config` checks it, in this order, and
the first failure is a typed error naming the field path:

1. bounds (`security.limits.SETUP_CONFIG`): size, depth, count, storable values -> 422
   `too_large` / `too_deep` / `too_many_items` / `unstorable_value`;
2. no clear credential (`find_clear_credential`): a credential key (the exact rule of
   `security.redact`) holds a "secret:NAME" reference or nothing, never a string, object or
   number; no credential-bearing header names; no userinfo or credential-named query
   parameter (`?api_key=`, `?key=`, `?sig=` …: `security.redact.url_credential`) in URLs
   -> 422 `secret_in_config`;
3. the provider's typed model (extra keys refused, types strict) -> 422 `invalid_config`;
4. the operator's policy (`ConfigPolicy`), as the model's `check_policy` applies it: tenant
   endpoints allowed at all (else 403 `tenant_endpoints_disabled`), `timeout` under the
   operator's ceiling, `model_path` only inside the operator's models directory -> 422
   `invalid_config`.

Which model a provider name uses is its factory's business (`providers.factory`): a provider
registered from outside brings its own model, or `CustomConfig`.

`caps` is checked here only as "an object"; `agent.caps.Caps.from_config` owns its rule and
the engine calls it (`Ator.validate_setup`). The stored config is the tenant's dict as given
(validated, not normalized), so a GET returns what was written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    ValidationError,
)

from ator.errors import Forbidden, ValidationFailed
from ator.security.limits import SETUP_CONFIG, Loc, check_json, refuse
from ator.security.redact import is_secret_key, url_credential
from ator.settings import Settings

__all__ = [
    "FORBIDDEN_HEADERS",
    "AnthropicConfig",
    "ConfigPolicy",
    "CustomConfig",
    "LocalConfig",
    "OpenAIConfig",
    "ProviderConfig",
    "ScriptedConfig",
    "find_clear_credential",
    "parse_provider_config",
]

# Hop-by-hop, framing, routing and cloud-metadata headers: a tenant must not steer where a
# request goes or how it is framed. Credential-bearing names (Authorization, Cookie, *-Key,
# *-Token ...) are refused by the credential rule before these are looked at.
FORBIDDEN_HEADERS = frozenset({
    "host", "connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade",
    "content-length", "content-type", "content-encoding", "expect", "forwarded", "via",
    "x-real-ip", "x-client-ip", "true-client-ip", "x-original-url", "x-rewrite-url",
    "x-http-method-override", "x-method-override", "metadata-flavor", "metadata",
    "x-google-metadata-request", "x-identity-header",
})
_FORBIDDEN_HEADER_PREFIXES = ("proxy-", "x-forwarded-", "x-envoy-", "x-amz-", "x-ms-")
MAX_HEADERS = 32
MAX_URL = 2048
MAX_SCRIPT_STEPS = 1_000

SecretRef = Annotated[str, StringConstraints(pattern=r"^secret:[A-Za-z0-9_.\-]{1,100}$")]
HeaderName = Annotated[
    str, StringConstraints(min_length=1, max_length=128,
                           pattern=r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$"),
]
HeaderValue = Annotated[str, StringConstraints(max_length=4096, pattern=r"^[^\r\n\x00]*$")]
PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
ShortText = Annotated[str, StringConstraints(max_length=200)]


def _http_url(value: str) -> str:
    if len(value) > MAX_URL:
        raise ValueError(f"longer than {MAX_URL} characters")
    if any(c.isspace() or ord(c) < 0x20 for c in value):
        raise ValueError("contains whitespace or control characters")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https"):
        raise ValueError("must be an http:// or https:// URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry user info (user:password@)")
    if not parts.hostname:
        raise ValueError("has no host")
    if parts.fragment:
        raise ValueError("must not have a fragment")
    try:
        _ = parts.port  # a port that is not 0-65535 raises here
    except ValueError as exc:
        raise ValueError("has an invalid port") from exc
    return value


HttpUrl = Annotated[str, AfterValidator(_http_url)]


class ProviderConfig(BaseModel):
    """Keys every provider accepts."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    endpoint_fields: ClassVar[tuple[str, ...]] = ()

    def check_policy(self, policy: ConfigPolicy) -> None:
        """Refuse what the operator does not allow (a subclass adds its own rules and calls
        this first): no tenant endpoint fields when tenant endpoints are off."""
        named = [f for f in self.endpoint_fields if getattr(self, f, None) is not None]
        if named and not policy.tenant_endpoints:
            raise Forbidden(
                f"config.{named[0]}: this server does not let setups name their own endpoint "
                "or headers (ATOR_TENANT_ENDPOINTS=false)",
                code="tenant_endpoints_disabled",
            )

    caps: dict[str, Any] | None = None  # rule: agent.caps.Caps.from_config
    prompt_cache: StrictBool | None = None
    # Context (agent/compaction.py): the model that writes compaction summaries (default the
    # setup's), the model's window in tokens (default: the operator's table, then ator's),
    # and the body limit in bytes of the endpoint (a proxy's own; at most the operator's
    # limit for the process endpoint).
    compaction_model: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None \
        = None
    context_window: Annotated[int, Field(ge=1024, le=100_000_000)] | None = None
    body_limit: Annotated[int, Field(ge=4096, le=1024 * 1024 * 1024)] | None = None
    # Pack each request into one prompt by priority (agent/single_prompt.py) instead of
    # compacting the conversation (CLI runtimes always do).
    single_prompt: StrictBool | None = None
    # USD this setup may spend since midnight in the org's time zone (engine/daily_caps.py).
    daily_budget_usd: Annotated[float, Field(ge=0, le=1_000_000, allow_inf_nan=False)] | None \
        = None


class _HttpProviderConfig(ProviderConfig):
    endpoint_fields: ClassVar[tuple[str, ...]] = ("base_url", "headers")

    api_key: SecretRef | None = None
    auth_token: SecretRef | None = None
    base_url: HttpUrl | None = None
    headers: Annotated[dict[HeaderName, HeaderValue], Field(max_length=MAX_HEADERS)] | None = None
    timeout: PositiveSeconds | None = None

    def check_policy(self, policy: ConfigPolicy) -> None:
        super().check_policy(policy)
        if self.timeout is not None and self.timeout > policy.max_timeout:
            raise refuse(("config", "timeout"),
                         f"must be at most {policy.max_timeout:g} seconds (the operator's "
                         "ceiling)", "invalid_config")
        for name in self.headers or {}:
            lowered = name.lower()
            if lowered in FORBIDDEN_HEADERS or lowered.startswith(_FORBIDDEN_HEADER_PREFIXES):
                raise refuse(("config", "headers", name),
                             "a hop-by-hop, routing or metadata header cannot be set",
                             "forbidden_header")


class AnthropicConfig(_HttpProviderConfig):
    """`provider: "anthropic"`: credentials by reference, an optional own endpoint."""


class OpenAIConfig(_HttpProviderConfig):
    """`provider: "openai"` (and Chat Completions-compatible servers)."""


class _ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    input: dict[str, Any] = Field(default_factory=dict)


class _NativeCall(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    input: dict[str, Any] = Field(default_factory=dict)
    result: Annotated[str, StringConstraints(max_length=100_000)] = ""


class _Usage(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    input_tokens: Annotated[int, Field(ge=0, le=10**9)] = 0
    output_tokens: Annotated[int, Field(ge=0, le=10**9)] = 0
    cache_read_tokens: Annotated[int, Field(ge=0, le=10**9)] = 0
    cache_write_tokens: Annotated[int, Field(ge=0, le=10**9)] = 0
    reported: StrictBool = True


class _StepError(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    message: Annotated[str, StringConstraints(max_length=2_000)] = "scripted error"
    kind: ShortText = "server"
    retryable: StrictBool = False


class _ScriptStep(BaseModel):
    """One step of `providers.scripted.ScriptStep` as JSON."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    text: str = ""
    thinking: str = ""
    tool_calls: list[_ToolCall] = Field(default_factory=list, max_length=64)
    stop_reason: ShortText | None = None
    usage: _Usage | None = None
    delay: Annotated[float, Field(ge=0, le=3600, allow_inf_nan=False)] = 0.0
    hang: StrictBool = False
    error: _StepError | None = None
    echo: StrictBool = False
    native_tool_calls: list[_NativeCall] = Field(default_factory=list, max_length=64)
    # USD as a decimal string ("0.0125"): what the provider reports the call cost.
    cost_usd: Annotated[str, StringConstraints(pattern=r"^\d{1,9}(\.\d{1,12})?$")] | None = None


class ScriptedConfig(ProviderConfig):
    """`provider: "scripted"`: a deterministic script (tests, demos)."""

    script: Annotated[list[_ScriptStep], Field(max_length=MAX_SCRIPT_STEPS)] | None = None
    repeat_last: StrictBool | None = None


class LocalConfig(ProviderConfig):
    """`provider: "local"`: the packaged model, or a GGUF file the operator put in
    `ATOR_LOCAL_MODELS_DIR` (an absolute path inside it)."""

    model_path: Annotated[str, StringConstraints(min_length=1, max_length=1024)] | None = None

    def check_policy(self, policy: ConfigPolicy) -> None:
        super().check_policy(policy)
        if self.model_path is not None:
            _check_model_path(self.model_path, policy.local_models_dir)


class CustomConfig(ProviderConfig):
    """A provider registered in-process by the embedder: its own keys are its business;
    the credential rule and the bounds still apply."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)


@dataclass(frozen=True, slots=True)
class ConfigPolicy:
    """What the operator allows tenants to put in a setup's config."""

    tenant_endpoints: bool = True  # may a setup name its own base_url / headers
    max_timeout: float = 600.0  # ceiling on config.timeout, seconds
    local_models_dir: Path | None = None  # where config.model_path may point; None: nowhere

    @classmethod
    def from_settings(cls, settings: Settings) -> ConfigPolicy:
        return cls(tenant_endpoints=settings.tenant_endpoints,
                   max_timeout=settings.max_provider_timeout,
                   local_models_dir=settings.local_models_dir)


def parse_provider_config(
    model: type[ProviderConfig], config: Mapping[str, Any] | None,
    policy: ConfigPolicy | None = None,
) -> ProviderConfig:
    """Check a setup's config against a provider's `model` and return it typed.

    Raises ValidationFailed (422, with `errors[].loc` starting at "config") or Forbidden
    (403 `tenant_endpoints_disabled`); see the module docstring for the order and codes."""
    policy = policy or ConfigPolicy()
    raw = dict(config or {})
    check_json(raw, SETUP_CONFIG, ("config",))
    find_clear_credential(raw, ("config",))
    try:
        parsed = model.model_validate(raw)
    except ValidationError as exc:
        raise _invalid(exc) from None
    parsed.check_policy(policy)
    return parsed


def find_clear_credential(value: Any, loc: Loc) -> None:
    """Raise 422 `secret_in_config` at the first clear credential in `value`.

    Credential keys may hold a reference ("secret:NAME"), None or "" (the typed model
    refuses the last); credential-bearing header names are refused whatever they hold."""
    path = tuple(loc)
    if isinstance(value, dict):
        in_headers = bool(path) and path[-1] == "headers"
        for key, child in value.items():
            where = (*path, key)
            if is_secret_key(str(key)):
                if in_headers:
                    raise refuse(where, "credential headers are not allowed; name the "
                                 "credential in api_key or auth_token as 'secret:NAME'",
                                 "secret_in_config")
                # "secret:…" is a reference (the typed model checks its spelling).
                if child is None or child == "" or (
                    isinstance(child, str) and child.startswith("secret:")
                ):
                    continue
                raise refuse(where, "holds a credential; store it with PUT /v1/secrets/NAME "
                             "and reference it as 'secret:NAME'", "secret_in_config")
            find_clear_credential(child, where)
    elif isinstance(value, list):
        for i, child in enumerate(value):
            find_clear_credential(child, (*path, i))
    elif isinstance(value, str) and (what := url_credential(value)) is not None:
        raise refuse(path, f"this URL carries a credential in {what}; store it with PUT "
                     "/v1/secrets/NAME and reference it as api_key = 'secret:NAME'",
                     "secret_in_config")


def _check_model_path(model_path: str, models_dir: Path | None) -> None:
    loc = ("config", "model_path")
    if models_dir is None:
        raise refuse(loc, "this server allows no model_path in setups (the operator sets "
                     "ATOR_LOCAL_MODELS_DIR to allow files in it)", "model_path_not_allowed")
    path = Path(model_path)
    if not path.is_absolute() or ".." in path.parts or path.suffix.lower() != ".gguf":
        raise refuse(loc, f"must be an absolute path to a .gguf file inside {models_dir}",
                     "model_path_not_allowed")
    if not path.resolve().is_relative_to(models_dir.resolve()):
        raise refuse(loc, f"must be inside {models_dir}", "model_path_not_allowed")


def _invalid(exc: ValidationError) -> ValidationFailed:
    errors = [
        {"loc": ["config", *(str(p) for p in err["loc"])], "msg": _message(err),
         "type": err["type"]}
        for err in exc.errors(include_url=False, include_input=False)
    ]
    first = errors[0]
    where = ".".join(first["loc"])
    return ValidationFailed(f"{where}: {first['msg']}", code="invalid_config", errors=errors)


def _message(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown key for this provider"
    msg = str(err["msg"])
    return re.sub(r"^Value error, ", "", msg)
