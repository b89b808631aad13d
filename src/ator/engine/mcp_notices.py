"""Telling the model which MCP tools this turn could not mount, and why (layer: engine;
imports agent, mcp.toolset, providers.base).

A server that is down, a tool whose name collides or whose schema is too large: the turn
goes on without them (one server never blocks the others), but the model is told before
its first call, as a labelled system layer, so it can say so to the user instead of
guessing; and the request's metadata carries the same words for the inspector.
"""

from __future__ import annotations

from dataclasses import replace

from ator.agent.hooks import LoopHook
from ator.agent.state import TurnContext, TurnState
from ator.mcp.toolset import McpToolset
from ator.providers.base import ModelRequest, SystemBlock

__all__ = ["McpNotices"]


class McpNotices(LoopHook):
    def __init__(self, toolset: McpToolset) -> None:
        self.toolset = toolset

    def reads_spend(self, turn: TurnContext) -> bool:
        return False  # this process's mount problems only

    async def before_call(
        self, turn: TurnContext, state: TurnState, request: ModelRequest
    ) -> ModelRequest:
        problems = self.toolset.problems.get(turn.turn_id)
        if not problems:
            return request
        text = ("## unavailable tools\nSome tools could not be mounted for this turn; tell the "
                "user if they need them:\n" + "\n".join(f"- {p}" for p in problems))
        state.request_meta["mcp_problems"] = list(problems)
        return replace(request, system=[*request.system,
                                        SystemBlock(text, name="mcp-status")])
