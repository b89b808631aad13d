"""A CLI runtime's setup config and model ids (layer: providers; imports pydantic,
providers.config, security.limits).

A setup's `model` reaches the CLI's argv, so it must match `MODEL_ID` (letters, digits and
`._-/:`, an optional `[1m]` suffix, at most 128 characters, never starting with `-`):
`sonnet"; rm -rf ~` is refused when the setup is written (422 `invalid_model`), not when a
turn starts. Argv is never a shell line anyway, and values are passed in the `--flag=value`
form so none can become a flag.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field

from ator.providers.config import ProviderConfig
from ator.security.limits import refuse

__all__ = ["MODEL_ID", "ClaudeCliConfig", "CodexCliConfig", "check_model"]

MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:\-]{0,127}(\[1m\])?")


def check_model(model: str) -> None:
    """Raise 422 `invalid_model` unless `model` may be put on a CLI's argv."""
    if not MODEL_ID.fullmatch(model):
        raise refuse(("model",), "a CLI runtime's model must be letters, digits and ._-/: "
                     "(at most 128, not starting with '-')", "invalid_model")


class _CliConfig(ProviderConfig):
    # The working directory: the org's workspace, or one per thread tree inside it.
    workspace: Literal["org", "thread"] = "org"


class ClaudeCliConfig(_CliConfig):
    """`provider: "claude_cli"`. `max_turns` / `max_budget_usd` are the CLI's own
    backstops (under ator's caps and ledger; the operator's defaults when left out)."""

    permission_mode: Literal["default", "acceptEdits", "plan", "dontAsk",
                             "bypassPermissions"] = "default"
    max_turns: Annotated[int, Field(ge=1, le=10_000)] | None = None
    max_budget_usd: Annotated[float, Field(gt=0, le=100_000, allow_inf_nan=False)] | None = None


class CodexCliConfig(_CliConfig):
    """`provider: "codex_cli"`: codex's own sandbox for the commands it runs."""

    sandbox: Literal["read-only", "workspace-write"] = "read-only"
