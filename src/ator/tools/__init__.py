"""Tools: definitions, toolsets, the per-step registry, and built-in tools (layer: tools)."""

from ator.tools.base import Tool, ToolCall, ToolContext, ToolOutcome, ToolResult, untrusted
from ator.tools.registry import ToolRegistry, truncate
from ator.tools.toolset import StaticToolset, ToolScope, Toolset, TurnTools

__all__ = [
    "StaticToolset",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolOutcome",
    "ToolRegistry",
    "ToolResult",
    "ToolScope",
    "Toolset",
    "TurnTools",
    "truncate",
    "untrusted",
]
