"""Which CLI runs and whether it can: resolution from operator settings only (layer:
providers; imports errors, settings, security.limits, providers.cli.jail).

The executable comes from the operator (`ATOR_CLAUDE_CLI_PATH`, `ATOR_CODEX_CLI_PATH`, else
the name on the server's PATH), never from a setup. A setup naming a CLI that is not
installed, or not logged in, is refused when it is written (422 `cli_not_installed` /
`cli_not_logged_in`, with the hint); `ator doctor` shows the same state and the version
(`describe`, which runs `--version`).

Logged in means: claude has credentials in the child's HOME (`.claude/.credentials.json`)
or a key among the operator's CLI variables; codex has `auth.json` in the operator's codex
home or a key among those variables.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ator.providers.cli.jail import child_env, process_env
from ator.security.limits import refuse
from ator.settings import Settings

__all__ = ["CLIS", "CliSpec", "CliState", "describe", "require"]


@dataclass(frozen=True, slots=True)
class CliSpec:
    provider: str
    command: str
    install: str
    login: str
    keys: tuple[str, ...]  # variables that log the CLI in without a login file

    def executable(self, settings: Settings) -> Path | None:
        configured = settings.claude_cli_path if self.command == "claude" \
            else settings.codex_cli_path
        if configured is not None:
            return configured if os.access(configured, os.X_OK) else None
        found = shutil.which(self.command, path=_path(settings))
        return Path(found) if found else None

    def logged_in(self, settings: Settings) -> bool:
        if any(settings.cli_env.get(k) for k in self.keys):
            return True
        if self.command == "claude":
            home = settings.cli_env.get("HOME") or os.environ.get("HOME", "")
            return bool(home) and (Path(home) / ".claude" / ".credentials.json").exists()
        return (codex_home(settings) / "auth.json").exists()


CLAUDE = CliSpec("claude_cli", "claude",
                 "install Claude Code (npm install -g @anthropic-ai/claude-code, or the "
                 "claude-agent-sdk wheel's bundled CLI) and set ATOR_CLAUDE_CLI_PATH",
                 "run `claude login` as the server's user, or put ANTHROPIC_API_KEY in "
                 "ATOR_CLI_ENV", ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN",
                                  "CLAUDE_CODE_OAUTH_TOKEN"))
CODEX = CliSpec("codex_cli", "codex",
                "install codex (npm install -g @openai/codex, or the openai-codex-cli-bin "
                "wheel) and set ATOR_CODEX_CLI_PATH",
                "run `codex login` as the server's user, or put OPENAI_API_KEY in "
                "ATOR_CLI_ENV", ("OPENAI_API_KEY", "CODEX_API_KEY"))
CLIS = (CLAUDE, CODEX)


def codex_home(settings: Settings) -> Path:
    """The operator's own codex home (where `codex login` wrote auth.json)."""
    if settings.codex_home is not None:
        return settings.codex_home
    return Path(os.environ.get("HOME", "/")) / ".codex"


def _path(settings: Settings) -> str | None:
    return settings.cli_env.get("PATH") or os.environ.get("PATH")


def require(spec: CliSpec, settings: Settings) -> Path:
    """The executable, or 422 `cli_not_installed` / `cli_not_logged_in` naming the fix."""
    found = spec.executable(settings)
    if found is None:
        raise refuse(("provider",), f"{spec.command} is not installed on this server: "
                     f"{spec.install}", "cli_not_installed")
    if not spec.logged_in(settings):
        raise refuse(("provider",), f"{spec.command} is not logged in on this server: "
                     f"{spec.login}", "cli_not_logged_in")
    return found


@dataclass(frozen=True, slots=True)
class CliState:
    spec: CliSpec
    path: Path | None
    version: str | None
    logged_in: bool
    problem: str | None  # None: ready


async def describe(spec: CliSpec, settings: Settings, timeout: float = 10.0) -> CliState:
    """The CLI's path, `--version` and login state, for `ator doctor`. `--version` runs
    with the environment a turn's child gets (the jail's), not the server's."""
    path = spec.executable(settings)
    if path is None:
        return CliState(spec, None, None, False, "not installed")
    version: str | None = None
    problem: str | None = None
    try:
        proc = await asyncio.create_subprocess_exec(
            str(path), "--version", stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            env=child_env(process_env(), operator=settings.cli_env, overlay={}))
        try:
            async with asyncio.timeout(timeout):
                out, _ = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            problem = f"`{spec.command} --version` did not answer in {timeout:g}s"
        else:
            version = out.decode("utf-8", "replace").strip().splitlines()[0] if out else None
            if proc.returncode:
                problem = f"`{spec.command} --version` exited {proc.returncode}"
    except OSError as exc:
        problem = f"cannot run {path}: {exc.strerror or exc}"
    logged_in = spec.logged_in(settings)
    if problem is None and not logged_in:
        problem = "not logged in"
    return CliState(spec, path, version, logged_in, problem)
