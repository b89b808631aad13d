"""`claude_cli` and `codex_cli` behind the provider seam (layer: providers; imports
providers.factory, providers.config, providers.cli.*, jsonenc).

Each factory: its config model, `check` (run when a setup is written: the model id pattern,
then the CLI installed and logged in), `sessions=True` (the CLI's session id is kept per
thread and resumed), `one_prompt=True` (the turn's context is packed into one prompt by the
context manager, not compacted) and `own_tools=True` (the CLI runs its own tools; ator's are
not mounted). Built once per distinct config; the executable is resolved at build time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ator import jsonenc
from ator.errors import ConfigError
from ator.providers.cli import resolve
from ator.providers.cli.config import ClaudeCliConfig, CodexCliConfig, check_model
from ator.providers.cli.runtimes import ClaudeCli, CliOptions, CodexCli
from ator.providers.config import ProviderConfig
from ator.providers.factory import BuildContext, Built, ProviderFactory, Recipe
from ator.settings import Settings

__all__ = ["CLI_FACTORIES"]


def _options(spec: resolve.CliSpec, ctx: BuildContext) -> CliOptions:
    found = spec.executable(ctx.settings)
    if found is None:
        raise ConfigError(f"{spec.command} is not installed on this server: {spec.install}")
    return CliOptions.from_settings(ctx.settings, found, resolve.codex_home(ctx.settings))


async def _claude(config: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    options = _options(resolve.CLAUDE, ctx)
    parsed = ClaudeCliConfig.model_validate(dict(config))

    async def build() -> Built:
        return Built(ClaudeCli(options, parsed))

    return Recipe(("claude_cli", jsonenc.canonical(dict(config)).decode(),
                   str(options.executable)), build)


async def _codex(config: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    options = _options(resolve.CODEX, ctx)
    parsed = CodexCliConfig.model_validate(dict(config))

    async def build() -> Built:
        return Built(CodexCli(options, parsed))

    return Recipe(("codex_cli", jsonenc.canonical(dict(config)).decode(),
                   str(options.executable)), build)


def _checker(spec: resolve.CliSpec) -> Any:
    def check(model: str, config: ProviderConfig, settings: Settings) -> None:
        check_model(model)
        resolve.require(spec, settings)

    return check


CLI_FACTORIES: Final[tuple[ProviderFactory, ...]] = (
    ProviderFactory("claude_cli", _claude, ClaudeCliConfig, default_model="sonnet",
                    sessions=True, check=_checker(resolve.CLAUDE), one_prompt=True,
                    own_tools=True),
    ProviderFactory("codex_cli", _codex, CodexCliConfig, default_model="gpt-5-codex",
                    sessions=True, check=_checker(resolve.CODEX), one_prompt=True,
                    own_tools=True),
)
