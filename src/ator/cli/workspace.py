"""The CLI's own corner of a database: an org, a setup per purpose and model, the current
chat thread (layer: cli; imports engine.runtime, providers.registry, providers.builtin, store,
cli.state).

`ator demo` and local `ator chat` share one org, named "demo", so a demo thread can be
continued with `ator chat --thread`. Ids are remembered in the data dir (`CliState`) and
checked against the database before use: a remembered id that is gone is found again by name
or made again, never trusted blindly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ator.cli.state import CliState
from ator.engine.runtime import Ator
from ator.engine.tenancy import Tenancy
from ator.errors import ConfigError, NotFound
from ator.providers.builtin import BUILTIN
from ator.providers.registry import default_provider
from ator.settings import Settings
from ator.store.records import Org, Setup, Thread
from ator.store.scope import Scope

__all__ = ["ORG_NAME", "SetupSpec", "Workspace", "pick_provider"]

ORG_NAME = "demo"


def pick_provider(settings: Settings, provider: str | None, model: str | None) -> tuple[str, str]:
    """--provider/--model as given, the rest filled in: no provider means the zero-config
    default (`default_provider`), no model means that provider's default model."""
    if provider is None:
        provider, default_model = default_provider(settings)
        return provider, model or default_model
    defaults = {f.name: f.default_model for f in BUILTIN}
    if provider not in defaults:
        raise ConfigError(f"unknown provider {provider!r}; known: {', '.join(sorted(defaults))}")
    return provider, model or defaults[provider] or provider


def _uuid(value: str | None) -> UUID | None:
    try:
        return UUID(value) if value else None
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class SetupSpec:
    """The setup a command wants; an existing one is reused only if it matches exactly."""

    purpose: str  # "demo" or "chat"
    provider: str
    model: str
    persona: str = ""
    config: dict[str, Any] | None = None
    tool_policy: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return f"{self.purpose} ({self.provider}/{self.model})"

    def matches(self, setup: Setup) -> bool:
        return (
            setup.archived_at is None
            and setup.provider == self.provider
            and setup.model == self.model
            and setup.persona == self.persona
            and setup.config == (self.config or {})
            and setup.tool_policy == (self.tool_policy or {})
        )


class Workspace:
    def __init__(self, ator: Ator, state: CliState, org: Org, *, reused: bool) -> None:
        self.ator = ator
        self.state = state
        self.org = org
        self.scope = Scope(org.id)
        self.org_reused = reused

    @classmethod
    async def open(cls, ator: Ator, *, org_id: UUID | None = None) -> Workspace:
        """The given org, else the remembered one, else the oldest org named "demo", else a
        new one. Raises NotFound when an explicit `org_id` does not exist."""
        state = CliState(ator.settings.data_dir, ator.db.url)
        if org_id is not None:
            return cls(ator, state, await ator.service(Tenancy).org(Scope(org_id)), reused=True)
        remembered = _uuid(state.get("org_id"))
        if remembered is not None:
            try:
                org = await ator.service(Tenancy).org(Scope(remembered))
                return cls(ator, state, org, reused=True)
            except NotFound:
                state.set("org_id", None)
        named = [o for o in await ator.service(Tenancy).all_orgs() if o.name == ORG_NAME]
        reused = bool(named)
        org = named[0] if named else await ator.create_org(ORG_NAME)
        state.set("org_id", str(org.id))
        state.save()
        return cls(ator, state, org, reused=reused)

    def _key(self, name: str) -> str:
        return f"{name}@{self.org.id}"

    async def setup(self, spec: SetupSpec) -> tuple[Setup, bool]:
        """A setup matching `spec`: the remembered one, one found by name, or a new one.
        Returns (setup, reused)."""
        key = self._key(f"setup:{spec.name}")
        remembered = _uuid(self.state.get(key))
        found: Setup | None = None
        if remembered is not None:
            try:
                found = await self.ator.setup(self.scope, remembered)
            except NotFound:
                found = None
        if found is None or not spec.matches(found):
            candidates = await self.ator.setups(self.scope)
            found = next((s for s in candidates if s.name == spec.name and spec.matches(s)),
                         None)
        reused = found is not None
        if found is None:
            found = await self.ator.create_setup(
                self.scope, name=spec.name, provider=spec.provider, model=spec.model,
                persona=spec.persona, config=spec.config, tool_policy=spec.tool_policy,
            )
        self.state.set(key, str(found.id))
        self.state.save()
        return found, reused

    async def setup_by_id(self, setup_id: UUID) -> Setup:
        return await self.ator.setup(self.scope, setup_id)

    async def thread_by_id(self, thread_id: UUID) -> Thread:
        """Raises NotFound (with a hint) when the thread is not in this org."""
        try:
            return await self.ator.thread(self.scope, thread_id)
        except NotFound as exc:
            raise NotFound(f"thread {thread_id} not found in org {self.org.name} "
                           f"({self.org.id}); pass --org if it is another org's") from exc

    async def chat_thread(self, setup: Setup, *, new: bool) -> tuple[Thread, bool]:
        """The remembered chat thread if it runs on `setup` (and `new` is not asked), else a
        new one, which becomes the remembered one. Returns (thread, reused)."""
        key = self._key("chat_thread")
        remembered = None if new else _uuid(self.state.get(key))
        if remembered is not None:
            try:
                thread = await self.ator.thread(self.scope, remembered)
                if thread.setup_id == setup.id:
                    return thread, True
            except NotFound:
                pass  # deleted meanwhile: start a new one
        thread = await self.ator.create_thread(self.scope, setup.id, title="ator chat")
        self.remember_chat_thread(thread)
        return thread, False

    def remember_chat_thread(self, thread: Thread) -> None:
        self.state.set(self._key("chat_thread"), str(thread.id))
        self.state.save()
