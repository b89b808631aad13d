"""A setup's tool policy: which tools its turns may mount (layer: tools; imports pydantic,
ator.errors, ator.security.limits).

    {"allow": ["calculator", "docs__*"], "deny": ["shell", "docs__delete_*"],
     "approve": ["docs__write_*"], "approve_timeout": 3600}

`allow` absent or null: every tool; `allow: []`: none. `deny` wins over `allow`. `approve`:
the mounted tools a person must approve before each call runs (engine/approvals.py; an
org may also require it of every MCP tool not marked read-only); `approve_timeout`: seconds
a call waits for that decision before it is denied by timeout (absent: the operator's
default, `ATOR_APPROVAL_TIMEOUT`). Names are
tool names as mounted (MCP tools namespaced `server__tool`), or globs over them (`*`, `?`,
`[...]`): `docs__*` is every tool of the MCP server `docs`. Anything else is a 422
`invalid_tool_policy` at write time, naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from ator.errors import ValidationFailed
from ator.security.limits import TOOL_POLICY, check_json

__all__ = ["MAX_APPROVAL_TIMEOUT", "MAX_POLICY_NAMES", "ToolPolicy", "parse_tool_policy"]

MAX_POLICY_NAMES = 1_000
MAX_APPROVAL_TIMEOUT = 30 * 86_400.0

ToolName = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-*?\[\]!]+$")
]


class ToolPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    allow: Annotated[list[ToolName], Field(max_length=MAX_POLICY_NAMES)] | None = None
    deny: Annotated[list[ToolName], Field(max_length=MAX_POLICY_NAMES)] = Field(
        default_factory=list
    )
    approve: Annotated[list[ToolName], Field(max_length=MAX_POLICY_NAMES)] = Field(
        default_factory=list
    )
    approve_timeout: Annotated[float, Field(gt=0, le=MAX_APPROVAL_TIMEOUT)] | None = None


def parse_tool_policy(policy: Mapping[str, Any] | None) -> ToolPolicy:
    """Check a setup's tool policy; raises ValidationFailed with `errors[].loc` from
    "tool_policy"."""
    raw = dict(policy or {})
    check_json(raw, TOOL_POLICY, ("tool_policy",))
    try:
        return ToolPolicy.model_validate(raw)
    except ValidationError as exc:
        errors = [
            {"loc": ["tool_policy", *(str(p) for p in err["loc"])], "msg": str(err["msg"]),
             "type": err["type"]}
            for err in exc.errors(include_url=False, include_input=False)
        ]
        where = ".".join(errors[0]["loc"])
        raise ValidationFailed(f"{where}: {errors[0]['msg']}", code="invalid_tool_policy",
                               errors=errors) from None
