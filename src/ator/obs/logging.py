"""Structured logging (layer: obs; imports ator.context, ator.security.redact).

JSON lines when stderr is not a terminal (or when forced), readable lines otherwise. Every
record carries the ids in ator.context; `extra` fields are redacted like everything else.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

from ator import jsonenc
from ator.context import current_ids
from ator.security.redact import redact

__all__ = ["configure_logging", "get_logger"]

_STD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(current_ids())
        extra = {k: v for k, v in record.__dict__.items() if k not in _STD}
        out.update(redact(extra))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return jsonenc.dumps(out)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ids = " ".join(f"{k}={v[:8]}" for k, v in current_ids().items())
        extra = {k: v for k, v in record.__dict__.items() if k not in _STD}
        tail = " ".join(f"{k}={v}" for k, v in redact(extra).items())
        base = f"{record.levelname.lower():7} {record.name}: {record.getMessage()}"
        text = " ".join(p for p in (base, ids, tail) if p)
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def configure_logging(*, json_lines: bool | None = None, level: str = "INFO") -> None:
    """Install the ator handler on the root logger (idempotent)."""
    use_json = (not sys.stderr.isatty()) if json_lines is None else json_lines
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if use_json else _TextFormatter())
    handler.set_name("ator")
    root = logging.getLogger()
    root.handlers = [h for h in root.handlers if h.get_name() != "ator"] + [handler]
    root.setLevel(level.upper())


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(name)
