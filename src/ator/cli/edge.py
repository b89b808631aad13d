"""Where a command meets the process (layer: cli; imports settings, obs, errors, cli.render).

Every command builds its `Settings` here, installs quiet logging (the terminal is for the
conversation; engine warnings still show), and maps the errors a user can fix to one line on
stderr and exit code 1 instead of a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import ValidationError

from ator.cli.remote import RemoteError
from ator.cli.render import fail
from ator.errors import AtorError, ConfigError
from ator.obs.logging import configure_logging
from ator.settings import Settings

__all__ = ["describe_database", "load_settings", "user_errors"]


def load_settings(**overrides: object) -> Settings:
    """Settings from ATOR_* variables; a bad value exits with the variable's name."""
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ()))
        fail(f"ATOR_{field.upper()}: {first.get('msg')}")
    # An explicit ATOR_LOG_LEVEL wins; otherwise only warnings interrupt the conversation.
    level = settings.log_level if "log_level" in settings.model_fields_set else "WARNING"
    configure_logging(json_lines=settings.log_json, level=level)
    return settings


def describe_database(settings: Settings) -> str:
    if settings.database_url is None:
        return f"embedded PostgreSQL in {settings.data_dir / 'pg'}"
    from ator.store.database import to_async_url

    try:
        url = to_async_url(settings.database_url)
    except ConfigError:
        return "ATOR_DATABASE_URL (not a PostgreSQL URL)"
    return url.set(drivername="postgresql").render_as_string(hide_password=True)


@contextmanager
def user_errors(settings: Settings | None = None) -> Iterator[None]:
    """Turn errors with a known cause into a message and exit code 1."""
    try:
        yield
    except AtorError as exc:
        fail(exc.message, hint=_hint(exc))
    except RemoteError as exc:
        status = f" (HTTP {exc.status} {exc.code})" if exc.status else ""
        fail(exc.message + status)
    except TimeoutError as exc:
        fail(str(exc) or "timed out")
    except OSError as exc:  # refused connections, unknown hosts, unreadable files
        where = describe_database(settings) if settings is not None else "the database"
        fail(f"{exc}", hint=f"is {where} reachable? `ator doctor` checks the setup")


def _hint(exc: AtorError) -> str | None:
    if exc.kind == "config":
        return "`ator doctor` lists what is configured and what is missing"
    return None
