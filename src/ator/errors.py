"""The one exception tree of ator (layer: bottom; imports nothing from ator).

    AtorError                      kind, retryable, status, code
    ├── ConfigError                bad settings or setup (status 400)
    ├── NotFound                   missing or another org's resource (404, never 403)
    ├── Conflict                   state does not allow the operation (409)
    ├── Forbidden                  role does not allow it within one's own org (403)
    ├── ValidationFailed           bad input (422)
    ├── RateLimited                too many requests (429, retry_after)
    ├── BudgetExceeded             org monthly budget or a per-turn cap hit (402)
    ├── SecretError                a secret reference cannot be resolved
    ├── CoordinationError          lease/pubsub backend trouble (retryable)
    ├── DatabaseUnavailable        PostgreSQL cannot take work now: disk full (503, retryable)
    ├── EgressBlocked              the egress guard refused a destination (net/)
    ├── McpError                   an MCP server failed; code says how, `facts` say what
    ├── ProviderError              a model call failed; kind is the typed error_kind
    │   └── ContextOverflow        the request does not fit the window
    └── ToolError                  a tool failed; becomes an is_error tool_result

Third-party exceptions are mapped once, at the boundary that calls them
(providers/, coord/redis.py, store/database.py).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AtorError",
    "BudgetExceeded",
    "ConfigError",
    "Conflict",
    "ContextOverflow",
    "CoordinationError",
    "DatabaseUnavailable",
    "EgressBlocked",
    "Forbidden",
    "McpError",
    "NotFound",
    "ProviderError",
    "RateLimited",
    "SecretError",
    "ToolError",
    "ValidationFailed",
]


class AtorError(Exception):
    """Base of every error ator raises on purpose."""

    kind: str = "internal"
    code: str = "internal_error"
    status: int = 500
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        kind: str | None = None,
        code: str | None = None,
        status: int | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if kind is not None:
            self.kind = kind
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        if retryable is not None:
            self.retryable = retryable


class ConfigError(AtorError):
    kind = "config"
    code = "invalid_config"
    status = 400


class NotFound(AtorError):
    kind = "not_found"
    code = "not_found"
    status = 404


class Conflict(AtorError):
    kind = "conflict"
    code = "conflict"
    status = 409


class Forbidden(AtorError):
    kind = "forbidden"
    code = "forbidden"
    status = 403


class ValidationFailed(AtorError):
    """Bad input. `errors` says where and why, in the shape of a request validation error:
    `[{"loc": ["config", "headers", "Host"], "msg": "...", "type": "<code>"}]`."""

    kind = "validation"
    code = "validation_failed"
    status = 422

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        errors: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message, code=code, status=status)
        self.errors = list(errors or [])


class RateLimited(AtorError):
    kind = "rate_limited"
    code = "rate_limited"
    status = 429
    retryable = True

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class BudgetExceeded(AtorError):
    kind = "budget"
    code = "budget_exceeded"
    status = 402


class SecretError(AtorError):
    kind = "secret"
    code = "secret_unavailable"
    status = 400


class CoordinationError(AtorError):
    kind = "coordination"
    code = "coordination_unavailable"
    status = 503
    retryable = True


class DatabaseUnavailable(AtorError):
    """PostgreSQL refused the work for want of a resource (its disk is full, code
    `database_disk_full`; out of memory or connections, `database_unavailable`): nothing of
    the statement was done, and the same request may succeed once it is back."""

    kind = "unavailable"
    code = "database_unavailable"
    status = 503
    retryable = True


class EgressBlocked(AtorError):
    """The egress guard refused an outbound connection: `host` is the name (or address) asked
    for, `rule` the check that refused it (e.g. "address 10.0.0.1 is private", "https
    required"). Never retryable: the same destination is refused again."""

    kind = "egress"
    code = "egress_blocked"
    status = 400

    def __init__(self, host: str, rule: str) -> None:
        super().__init__(f"egress to {host!r} refused: {rule}")
        self.host = host
        self.rule = rule


class McpError(AtorError):
    """An MCP server could not serve a call. `code` is one of mcp_protocol_unsupported,
    mcp_transport_unsupported, mcp_timeout, mcp_http_status, mcp_auth_failed,
    mcp_server_unavailable, mcp_session_restarted; `facts` carries what the reader needs to
    act (the versions each side supports, the HTTP status, the timeout…)."""

    kind = "mcp"
    code = "mcp_server_unavailable"
    status = 502

    def __init__(self, message: str, *, code: str, facts: dict[str, Any] | None = None,
                 retryable: bool = False) -> None:
        super().__init__(message, code=code, retryable=retryable)
        self.facts = dict(facts or {})


class ProviderError(AtorError):
    """A model call failed. `kind` is one of: rate_limit, overloaded, server, network,
    timeout, auth, bad_request, context_overflow, not_found, refusal, protocol, unknown."""

    kind = "unknown"
    code = "provider_error"
    status = 502

    def __init__(
        self,
        message: str,
        *,
        kind: str = "unknown",
        retryable: bool = False,
        status_code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, kind=kind, retryable=retryable)
        self.status_code = status_code
        self.retry_after = retry_after


class ContextOverflow(ProviderError):
    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message, kind="context_overflow", status_code=status_code)


class ToolError(AtorError):
    kind = "tool"
    code = "tool_error"
