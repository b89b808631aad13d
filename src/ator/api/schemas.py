"""Request bodies (layer: api; imports pydantic, security.limits). Every body is validated
before use, and NUL is refused in every one (`unstorable_value`).

The free-form fields (a setup's `config` and `tool_policy`, a thread's `metadata`) are typed
and bounded by the runtime where they are written (`providers.config`, `tools.policy`,
`security.limits`), so the Python API and the HTTP API refuse the same things with the same
422 codes; the descriptions here say what they accept.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, Literal
from uuid import UUID

from pydantic import ConfigDict, Field, model_validator

from ator.agent.routes import Body
from ator.errors import ValidationFailed
from ator.security.limits import (
    CLIENT_MESSAGE_ID,
    MESSAGE_CHARS,
    SETUP_CONFIG,
    check_json,
)
from ator.security.roles import Role

__all__ = [
    "AnalysisKindIn",
    "AnalysisRunIn",
    "AnalysisScheduleIn",
    "ApprovalDecisionIn",
    "ApprovalSettingsIn",
    "KeyIn",
    "McpServerBody",
    "McpServerPatch",
    "MessageIn",
    "OrgIn",
    "OrgPatch",
    "SecretIn",
    "SetupIn",
    "SetupPatch",
    "SsoIn",
    "ThreadIn",
    "WebhookEndpointIn",
    "WebhookEndpointPatch",
    "WebhookInboundIn",
    "WebhookInboundPatch",
    "WebhookReplayIn",
    "WebhookRotateIn",
]

Name = Field(min_length=1, max_length=200)

_CONFIG = (
    "Provider options, checked per provider with unknown keys refused. anthropic/openai: "
    "api_key, auth_token ('secret:NAME' references only), base_url (http/https, no user "
    "info), headers (at most 32; no credential, hop-by-hop or routing names), timeout "
    "(seconds, up to the operator's ceiling), prompt_cache, caps. scripted: script, "
    "repeat_last, prompt_cache, caps. local: model_path (inside the operator's models "
    "directory), prompt_cache, caps. At most 256 KiB as JSON, 32 levels deep."
)
_TOOL_POLICY = ('{"allow": [tool names] | null, "deny": [tool names]}; allow null or absent '
                "means every tool, [] none; deny wins.")
_METADATA = "Free-form JSON of the caller's: at most 64 KiB, 16 levels deep, 2000 values."


_Body = Body  # the base of every body, shared with the extensions' routers (agent.routes)


def _usd() -> Any:
    return Field(default=None, ge=0, max_digits=14, decimal_places=6, allow_inf_nan=False)


class OrgIn(_Body):
    name: str = Name
    monthly_budget_usd: Decimal | None = _usd()
    budget_ceiling_usd: Decimal | None = _usd()  # the operator's; the org cannot lift it


class OrgPatch(_Body):
    """Only the fields present change; `null` clears. The ceiling is the operator's."""

    monthly_budget_usd: Decimal | None = _usd()
    budget_ceiling_usd: Decimal | None = _usd()


class SsoIn(_Body):
    """An org's OpenID Connect client for console sign-in."""

    issuer: str = Field(min_length=8, max_length=500,
                        description="the IdP's issuer URL, exactly as its tokens name it")
    client_id: str = Field(min_length=1, max_length=500)
    client_secret: str | None = Field(default=None, max_length=2000,
                                      description="stored encrypted; never shown again")
    email_domain: str | None = Field(default=None, max_length=253,
                                     description="only emails in this domain may sign in")
    email_claim: str = Field(default="email", min_length=1, max_length=100)
    role_claim: str | None = Field(default=None, max_length=100,
                                   description="the claim whose values map to roles")
    role_map: dict[str, Role] = Field(default_factory=dict, max_length=100,
                                      description="claim value -> admin | member | viewer")
    default_role: Role = "member"


class TreeCapsIn(_Body):
    """An org's own subagent tree caps; each lowers what the org's setups allow (bounded by
    the operator's ceilings). Left out: no org-level cap."""

    subagent_depth: int | None = Field(default=None, ge=0)
    subagent_width: int | None = Field(default=None, ge=0)
    subagent_live: int | None = Field(default=None, ge=0)
    tree_tokens: int | None = Field(default=None, ge=0)
    tree_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)


class KeyIn(_Body):
    name: str = Name
    role: Role
    email: str = Field(min_length=3, max_length=320, pattern=r"^[^@\s]+@[^@\s]+$")


class SecretIn(_Body):
    value: str = Field(min_length=1, max_length=20_000)


class SetupIn(_Body):
    name: str = Name
    provider: str = Field(min_length=1, max_length=50)
    model: str = Field(min_length=1, max_length=200)
    persona: str = Field(default="", max_length=50_000)
    config: dict[str, Any] = Field(default_factory=dict, description=_CONFIG)
    tool_policy: dict[str, Any] = Field(default_factory=dict, description=_TOOL_POLICY)


class SetupPatch(_Body):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    provider: str | None = Field(default=None, min_length=1, max_length=50)
    model: str | None = Field(default=None, min_length=1, max_length=200)
    persona: str | None = Field(default=None, max_length=50_000)
    config: dict[str, Any] | None = Field(
        default=None,
        description=_CONFIG + " Replaces the whole config; a '[redacted]' placeholder (as GET "
        "shows) keeps the stored value at that place.",
    )
    tool_policy: dict[str, Any] | None = Field(default=None, description=_TOOL_POLICY)


class ThreadIn(_Body):
    setup_id: UUID
    title: str = Field(default="", max_length=500)
    instructions: str = Field(default="", max_length=50_000)
    metadata: dict[str, Any] = Field(default_factory=dict, description=_METADATA)


class MessageIn(_Body):
    """Checked by the runtime's one message rule (`security.limits.check_message`), the same
    for the socket's `send`: the constraints below are documentation, not a second copy."""

    text: Any = Field(json_schema_extra={"type": "string", "minLength": 1,
                                         "maxLength": MESSAGE_CHARS})
    client_message_id: Any = Field(default=None, json_schema_extra={
        "type": ["string", "null"], "pattern": CLIENT_MESSAGE_ID})


class PolicyIn(_Body):
    """The org's policy prompt layer. `replace`: it stands instead of ator's core
    instructions (the rule that tool output is data is kept). `if_version`: refuse (409)
    unless this is the version in force."""

    text: str = Field(max_length=50_000)
    replace: bool = False
    if_version: int | None = Field(default=None, ge=0, le=2**31 - 1)


class InstructionsIn(_Body):
    """A thread's instructions layer (see PolicyIn for `if_version`)."""

    text: str = Field(max_length=50_000)
    if_version: int | None = Field(default=None, ge=0, le=2**31 - 1)


_MCP_HEADERS = ('Header name -> secret reference: "secret:NAME", "Bearer secret:NAME" or '
                '"Basic secret:NAME"; at most 20. Never a credential in clear.')
_MCP_URL = ("The server's http(s) URL: reachable by the egress guard, with no user info and no "
            "credential in its query (put those in headers by secret reference).")


class McpServerBody(_Body):
    """An MCP server as `POST /v1/mcp-servers` takes it. The types are checked here; the rule
    (names, URL, header references, bounds) by the runtime (`engine.mcp.McpServerIn`), which
    answers 422 `invalid_mcp_server`, `secret_in_config` or `mcp_transport_unsupported`."""

    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(description="Letters, digits, '_' and '-', at most 32; no '__'.")
    transport: str = Field(default="http", description="'http' (tenants); 'stdio' is "
                           "the operator's (ATOR_MCP_STDIO_SERVERS).")
    url: str | None = Field(default=None, description=_MCP_URL)
    headers: dict[str, str] = Field(default_factory=dict, description=_MCP_HEADERS)
    token: str | None = Field(default=None, description='"secret:NAME": sent as '
                              "Authorization: Bearer.")
    timeout_s: float = Field(default=30.0, description="Per call, seconds (0, 600].")
    enabled: bool = True
    allow: list[str] | None = Field(default=None, description="Tool name globs mounted; "
                                    "null: every tool.")
    deny: list[str] = Field(default_factory=list, description="Tool name globs never mounted.")


class McpServerPatch(_Body):
    """Only the fields present change (checked as `McpServerBody` once merged)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    name: str | None = None
    transport: str | None = None
    url: str | None = Field(default=None, description=_MCP_URL)
    headers: dict[str, str] | None = Field(default=None, description=_MCP_HEADERS)
    token: str | None = None
    timeout_s: float | None = None
    enabled: bool | None = None
    allow: list[str] | None = None
    deny: list[str] | None = None


class WebhookEndpointIn(_Body):
    """An outbound endpoint as `POST /v1/webhooks/endpoints` takes it. The URL is judged by
    the egress guard (422 `webhook_url_refused`); unknown event types are 422
    `webhook_event_type_unknown`."""

    url: str = Field(min_length=1, max_length=2048,
                     description="https (http only to a host the operator allowlisted).")
    event_types: list[str] = Field(default_factory=list, max_length=32,
                                   description="Types sent (`turn.ended`); empty: all.")
    description: str = Field(default="", max_length=500)


class WebhookEndpointPatch(_Body):
    """`PATCH /v1/webhooks/endpoints/{id}`: what changes. `enabled` false disables it (the
    org is told by an `endpoint.disabled` event); true enables it again."""

    url: str | None = Field(default=None, min_length=1, max_length=2048)
    event_types: list[str] | None = Field(default=None, max_length=32)
    description: str | None = Field(default=None, max_length=500)
    enabled: bool | None = None


class WebhookInboundIn(_Body):
    """An inbound endpoint as `POST /v1/webhooks/inbound` takes it."""

    name: str = Name
    mapping: dict[str, Any] = Field(description=(
        'Where a payload goes, with JSONata over it: {"to": "thread", "thread_id" | '
        '"setup_id", "text", "key"?, "title"?} or {"to": "workflow", "workflow_id", '
        '"input"?, "key"?, "version"?}.'))
    verification: dict[str, Any] | None = Field(default=None, description=(
        '{"method": "standard_webhooks"} (default), {"method": "hmac", "header", '
        '"algorithm"?, "encoding"? (hex|base64), "prefix"?, "id_header"?} or '
        '{"method": "token", "id_header"?}.'))
    secret: str | None = Field(default=None, min_length=16, max_length=512, description=(
        "The sender's own secret (hmac, standard_webhooks); made by ator when absent."))
    max_bytes: int | None = Field(default=None, ge=1, description=(
        "The largest body taken (at most the operator's ceiling)."))


class WebhookInboundPatch(_Body):
    """`PATCH /v1/webhooks/inbound/{id}`: a new name, mapping (replay failed requests
    after) or size limit (null: the operator's)."""

    name: str | None = Field(default=None, min_length=1, max_length=200)
    mapping: dict[str, Any] | None = None
    max_bytes: int | None = Field(default=None, ge=1)


class WebhookRotateIn(_Body):
    """`POST /v1/webhooks/endpoints/{id}/rotate-secret`: how long the old secret still signs."""

    overlap_s: int = Field(default=86_400, ge=0, le=7 * 86_400,
                           description="Seconds both secrets sign (two signatures).")


class WebhookReplayIn(_Body):
    """`POST /v1/webhooks/endpoints/{id}/replay`: the failed deliveries made in
    [since, until) are sent again (at most `limit`, oldest first)."""

    since: datetime
    until: datetime
    limit: int = Field(default=1000, ge=1, le=10_000)


class ApprovalDecisionIn(_Body):
    """`POST /v1/approvals/{id}/decision`: approve (optionally with edited arguments,
    re-validated against the tool's schema: 422 `invalid_arguments`) or deny with a reason.
    Decided already (or by someone else at the same moment): 409 `approval_decided`."""

    decision: Literal["approve", "deny"]
    arguments: dict[str, Any] | None = Field(
        default=None, description="approve only: the arguments to run with instead")
    reason: str | None = Field(default=None, max_length=2000)

    @model_validator(mode="after")
    def _bounded(self) -> ApprovalDecisionIn:
        if self.arguments is not None:
            if self.decision != "approve":
                raise ValidationFailed("arguments: only an approval takes arguments",
                                       code="invalid_decision")
            check_json(self.arguments, SETUP_CONFIG, ("arguments",))
        return self


class ApprovalSettingsIn(_Body):
    """`PUT /v1/approvals/settings` (admins): whether every MCP tool not marked read-only
    (`readOnlyHint`) needs a person's approval in this org."""

    approve_mcp_writes: bool


class AnalysisKindIn(_Body):
    """An org's analysis kind as `PUT /v1/analyses/kinds/{name}` takes it; the spec is
    checked by the analyses service (422 `invalid_kind`, ator.analyses.kind)."""

    spec: dict[str, Any] = Field(description="input, key_fields, system, prompt, model, "
                                 "output_schema, validators, rule, apply, at_limit, then, "
                                 "triggers, evals (ator.analyses.kind).")


class AnalysisRunIn(_Body):
    """A run queued by `POST /v1/analyses/runs`."""

    kind: str = Field(min_length=1, max_length=63)
    target: str = Field(min_length=1, max_length=200)
    options: dict[str, Any] = Field(default_factory=dict,
                                    description="`payload` for a payload kind; at most 64 KiB.")
    then: list[str] = Field(default_factory=list, max_length=10,
                            description="Kinds chained after this one, in order.")
    force: bool = False


class AnalysisScheduleIn(_Body):
    """A recurring run for this org (`POST /v1/analyses/schedules`)."""

    kind: str = Field(min_length=1, max_length=63)
    target: str = Field(min_length=1, max_length=200)
    cron: str = Field(min_length=1, max_length=100)
    zone: str = Field(default="UTC", min_length=1, max_length=64)
    options: dict[str, Any] = Field(default_factory=dict)
