"""Tools: definitions, the per-step registry, and built-in tools (layer: tools)."""

from ator.tools.base import Tool, ToolCall, ToolContext, ToolOutcome
from ator.tools.registry import ToolRegistry, truncate

__all__ = ["Tool", "ToolCall", "ToolContext", "ToolOutcome", "ToolRegistry", "truncate"]
