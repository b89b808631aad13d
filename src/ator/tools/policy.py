"""A setup's tool policy: which tools its turns may mount (layer: tools; imports pydantic,
ator.errors, ator.security.limits).

    {"allow": ["calculator", "docs__*"], "deny": ["shell", "docs__delete_*"]}

`allow` absent or null: every tool; `allow: []`: none. `deny` wins over `allow`. Names are
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

__all__ = ["MAX_POLICY_NAMES", "ToolPolicy", "parse_tool_policy"]

MAX_POLICY_NAMES = 1_000

ToolName = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-*?\[\]!]+$")
]


class ToolPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    allow: Annotated[list[ToolName], Field(max_length=MAX_POLICY_NAMES)] | None = None
    deny: Annotated[list[ToolName], Field(max_length=MAX_POLICY_NAMES)] = Field(
        default_factory=list
    )


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
