"""Where and with what a CLI runs: the jail (layer: providers; imports errors only).

- **cwd**: the org's workspace, `<root>/<org id>`, or `<root>/<org id>/threads/<tree id>`
  when the setup asks for one per thread tree. Ids are UUIDs checked here, so a path is never
  built from tenant text.
- **environment**: built from nothing but an allow-list of the process's variables (PATH,
  HOME, locale, TMPDIR ...) plus what the operator names for CLIs (`ATOR_CLI_ENV`) plus the
  overlay's own. No `ATOR_*` variable passes, whoever names it; nor does anything else of
  the server's environment (its provider keys, database URL, master key).
- **vanilla overlay**: a settings file (claude: `--settings` with hooks disabled, and
  `--setting-sources ""` so user and project settings, their hooks and plugins, are not
  read) and a CODEX_HOME of ator's own (a vanilla `config.toml`; only the operator's login,
  `auth.json`, linked in), kept outside every workspace. The operator's own CLI settings,
  hooks, plugins and MCP servers never apply inside a tenant's run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from ator.errors import ConfigError

__all__ = ["BASE_ENV", "VANILLA_CLAUDE_SETTINGS", "Jail", "child_env", "workspace"]

#: Variables of the server's own environment a CLI child may see (when set).
BASE_ENV = ("PATH", "HOME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
            "USER", "LOGNAME", "SHELL", "TERM")

#: What claude reads as its only settings: no hooks, nothing of the operator's.
VANILLA_CLAUDE_SETTINGS: Mapping[str, object] = {"disableAllHooks": True, "hooks": {}}
_VANILLA_CODEX_CONFIG = "# ator's vanilla codex config: nothing of the operator's applies\n"


@dataclass(frozen=True, slots=True)
class Jail:
    """The directories one CLI run may use: its cwd, and ator's overlay (outside it)."""

    cwd: Path
    overlay: Path


def workspace(root: Path, org_id: str | None, tree_id: str | None) -> Path:
    """The run's cwd, created if missing: the org's directory, or its thread tree's."""
    if org_id is None:
        raise ConfigError("a CLI runtime runs only inside an org's turn")
    path = root / _uuid(org_id)
    if tree_id is not None:
        path = path / "threads" / _uuid(tree_id)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def claude_overlay(home: Path) -> Path:
    """The vanilla settings file claude gets with `--settings` (written once)."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = home / "claude-settings.json"
    wanted = json.dumps(VANILLA_CLAUDE_SETTINGS, sort_keys=True)
    if not path.exists() or path.read_text() != wanted:
        path.write_text(wanted)
    return path


def codex_overlay(home: Path, org_id: str, operator_home: Path | None,
                  operator_config: str = "") -> Path:
    """The org's CODEX_HOME: a vanilla config (plus the operator's own `codex_config`, never
    the operator's codex home's config) and, linked in, the operator's login only. Kept per
    org (codex writes its session files there) and outside every workspace."""
    path = home / "codex" / _uuid(org_id)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    config = path / "config.toml"
    wanted = _VANILLA_CODEX_CONFIG + (operator_config.strip() + "\n" if operator_config else "")
    if not config.exists() or config.read_text() != wanted:
        config.write_text(wanted)
    auth = path / "auth.json"
    source = operator_home / "auth.json" if operator_home is not None else None
    if source is not None and source.exists() and not auth.exists():
        auth.symlink_to(source)
    return path


def child_env(source: Mapping[str, str], *, operator: Mapping[str, str],
              overlay: Mapping[str, str], keep: Iterable[str] = BASE_ENV) -> dict[str, str]:
    """The child's environment: allow-listed variables of `source`, then the operator's
    CLI variables, then the overlay's; never an `ATOR_*` name."""
    env = {name: source[name] for name in keep if name in source}
    env.update(operator)
    env.update(overlay)
    return {k: v for k, v in env.items() if not k.upper().startswith("ATOR_")}


def _uuid(value: str) -> str:
    try:
        return str(UUID(value))
    except ValueError:
        raise ConfigError(f"not an id: {value!r}") from None


def process_env() -> dict[str, str]:
    """The server's environment, read once per run at this edge (the jail filters it)."""
    return dict(os.environ)
