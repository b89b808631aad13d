"""Structured logging (layer: obs; imports ator.context, ator.security.redact).

JSON lines when stderr is not a terminal (or when forced), readable lines otherwise. Every
record carries the ids in ator.context; `extra` fields are redacted like everything else.

Every record that reaches the handler, ator's own and every library's (httpx, httpx2,
httpcore, mcp, uvicorn's access log, the provider SDKs), first passes `UrlCredentialFilter`:
the userinfo of any URL and the value of any credential-named query parameter (`api_key`,
`key`, `token`, `sig` …; `security.redact.scrub_urls`) in its message and its traceback become
`[redacted]`. It sits on the handler, not on a logger, because records propagated from a
library's logger skip the filters of the loggers above it.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

from ator import jsonenc
from ator.context import current_ids
from ator.obs.tracing import log_ids
from ator.security.redact import redact, scrub_urls

__all__ = ["UrlCredentialFilter", "configure_logging", "get_logger"]

_STD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class UrlCredentialFilter(logging.Filter):
    """Scrubs credentials in URLs out of a record's message and traceback (never drops it)."""

    _render = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrub_urls(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._render.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub_urls(record.exc_text)
        return True


def _exception_text(formatter: logging.Formatter, record: logging.LogRecord) -> str | None:
    if record.exc_text:  # rendered (and scrubbed) by the filter
        return record.exc_text
    return formatter.formatException(record.exc_info) if record.exc_info else None


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(current_ids())
        out.update(log_ids())
        extra = {k: v for k, v in record.__dict__.items() if k not in _STD}
        out.update(redact(extra))
        if (exc := _exception_text(self, record)) is not None:
            out["exc"] = exc
        return jsonenc.dumps(out)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ids = " ".join(f"{k}={v[:8]}" for k, v in {**current_ids(), **log_ids()}.items())
        extra = {k: v for k, v in record.__dict__.items() if k not in _STD}
        tail = " ".join(f"{k}={v}" for k, v in redact(extra).items())
        base = f"{record.levelname.lower():7} {record.name}: {record.getMessage()}"
        text = " ".join(p for p in (base, ids, tail) if p)
        if (exc := _exception_text(self, record)) is not None:
            text += "\n" + exc
        return text


def configure_logging(*, json_lines: bool | None = None, level: str = "INFO") -> None:
    """Install the ator handler on the root logger (idempotent)."""
    use_json = (not sys.stderr.isatty()) if json_lines is None else json_lines
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if use_json else _TextFormatter())
    handler.addFilter(UrlCredentialFilter())
    handler.set_name("ator")
    root = logging.getLogger()
    root.handlers = [h for h in root.handlers if h.get_name() != "ator"] + [handler]
    root.setLevel(level.upper())


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(name)
