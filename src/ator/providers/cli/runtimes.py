"""The `claude_cli` and `codex_cli` providers: argv, jail and parser for one call (layer:
providers; imports providers.base, providers.cli.*, settings).

claude: `claude -p --output-format stream-json --verbose --include-partial-messages
--model=M --permission-mode=P --max-turns=N --max-budget-usd=U --setting-sources=
--settings=<vanilla file> --strict-mcp-config [--resume=<session id>]`, the prompt on stdin.
codex: `codex exec --json --model=M --sandbox=S --skip-git-repo-check [resume <thread id>]
-`, the prompt on stdin (`-`), with CODEX_HOME set to ator's vanilla overlay.

Values are passed in the `--flag=value` form (a value starting with `-` cannot become a
flag); a session id from the thread's stored state is used only when it matches a strict
pattern. The cwd is the org's workspace (per thread tree when the setup asks).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ator.errors import ConfigError
from ator.providers.base import ModelRequest, StreamEvent
from ator.providers.cli import jail
from ator.providers.cli.claude import ClaudeStream
from ator.providers.cli.codex import CodexStream
from ator.providers.cli.config import ClaudeCliConfig, CodexCliConfig, check_model
from ator.providers.cli.runtime import CliRun, render_prompt, run_cli
from ator.settings import Settings

__all__ = ["ClaudeCli", "CliOptions", "CodexCli"]

_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,127}")


@dataclass(frozen=True, slots=True)
class CliOptions:
    """The operator's side of a CLI runtime (settings, resolved once per build)."""

    executable: Path
    workspaces: Path
    overlays: Path
    env: Mapping[str, str]
    codex_home: Path | None
    codex_config: str
    line_limit: int
    after_result: float
    kill_grace: float
    max_turns: int
    max_budget_usd: float

    @classmethod
    def from_settings(cls, settings: Settings, executable: Path, codex_home: Path | None
                      ) -> CliOptions:
        return cls(
            executable=executable,
            workspaces=settings.cli_workspaces_dir or settings.data_dir / "workspaces",
            overlays=settings.data_dir / "cli-overlays", env=dict(settings.cli_env),
            codex_home=codex_home, codex_config=settings.codex_config,
            line_limit=settings.cli_line_limit,
            after_result=settings.cli_after_result, kill_grace=settings.cli_kill_grace,
            max_turns=settings.cli_max_turns, max_budget_usd=settings.cli_max_budget_usd)


def _session(state: Mapping[str, Any] | None, key: str) -> str | None:
    value = (state or {}).get(key)
    return value if isinstance(value, str) and _SESSION_ID.fullmatch(value) else None


def _cwd(options: CliOptions, request: ModelRequest, per_thread: bool) -> Path:
    return jail.workspace(options.workspaces, request.org_id,
                          request.thread_tree if per_thread else None)


class ClaudeCli:
    name = "claude_cli"

    def __init__(self, options: CliOptions, config: ClaudeCliConfig) -> None:
        self.options = options
        self.config = config

    def argv(self, request: ModelRequest) -> list[str]:
        check_model(request.model)
        o, c = self.options, self.config
        settings = jail.claude_overlay(o.overlays)
        argv = [str(o.executable), "-p", "--output-format", "stream-json", "--verbose",
                "--include-partial-messages", f"--model={request.model}",
                f"--permission-mode={c.permission_mode}",
                f"--max-turns={c.max_turns or o.max_turns}",
                f"--max-budget-usd={c.max_budget_usd or o.max_budget_usd:g}",
                "--setting-sources=", f"--settings={settings}", "--strict-mcp-config"]
        resume = _session(request.session, "session_id")
        if resume is not None:
            argv.append(f"--resume={resume}")
        return argv

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        o = self.options
        run = CliRun(self.argv(request), _cwd(o, request, self.config.workspace == "thread"),
                     jail.child_env(jail.process_env(), operator=o.env, overlay={}),
                     render_prompt(request), o.line_limit, o.after_result, o.kill_grace)
        return run_cli(run, ClaudeStream())


class CodexCli:
    name = "codex_cli"

    def __init__(self, options: CliOptions, config: CodexCliConfig) -> None:
        self.options = options
        self.config = config

    def argv(self, request: ModelRequest) -> list[str]:
        check_model(request.model)
        argv = [str(self.options.executable), "exec", "--json", f"--model={request.model}",
                f"--sandbox={self.config.sandbox}", "--skip-git-repo-check"]
        resume = _session(request.session, "thread_id")
        if resume is not None:
            argv += ["resume", resume]
        return [*argv, "-"]

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        o = self.options
        if request.org_id is None:
            raise ConfigError("a CLI runtime runs only inside an org's turn")
        home = jail.codex_overlay(o.overlays, request.org_id, o.codex_home, o.codex_config)
        run = CliRun(self.argv(request), _cwd(o, request, self.config.workspace == "thread"),
                     jail.child_env(jail.process_env(), operator=o.env,
                                    overlay={"CODEX_HOME": str(home)}),
                     render_prompt(request), o.line_limit, o.after_result, o.kill_grace)
        return run_cli(run, CodexStream(request.session))
