"""How a tool's failure reads, to the model and to the user (layer: tools; imports tools.base,
errors).

One shape for every failure, whoever raised it: `code: sentence`, the code stable and typed
(an `AtorError`'s own code: `invalid_setup`, `mcp_timeout`, `egress_blocked`, …), never a
Python class name. An exception that is not an `AtorError` is a bug in the tool: the model
reads `internal_error` with its message, and the log keeps the traceback.
"""

from __future__ import annotations

import logging

from ator.errors import AtorError
from ator.tools.base import ToolResult

__all__ = ["failure", "timed_out"]

log = logging.getLogger(__name__)


def failure(exc: Exception, *, tool: str, untrusted: bool = False) -> ToolResult:
    """The `is_error` result for an exception a tool raised (or returned as its answer)."""
    if isinstance(exc, AtorError):
        code, message = exc.code, exc.message
    else:
        log.warning("tool %r raised an unexpected error", tool, exc_info=exc)
        code, message = "internal_error", str(exc) or "the tool failed without saying why"
    facts = getattr(exc, "facts", {})
    return ToolResult(f"{code}: {message}", is_error=True, untrusted=untrusted,
                      meta={"code": code, **facts})


def timed_out(seconds: float) -> ToolResult:
    return ToolResult(f"tool_timeout: the tool did not answer within {seconds:g}s",
                      is_error=True, untrusted=False, meta={"code": "tool_timeout"})
