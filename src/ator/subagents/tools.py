"""The subagent tools a model calls (layer: subagents; imports tools, store.scope,
subagents.service).

Each handler reaches the service through `ToolContext.service(Subagents)`, so a turn that
is not granted it gets a plain error result. Arguments are checked against the schemas
below before a handler runs (a missing `task` is an `is_error` result, never a child with
task "undefined"). `agent_result` returns another agent's text: it is labelled untrusted.
"""

from __future__ import annotations

from typing import Any

from ator.store.scope import Scope
from ator.subagents.service import Subagents, parse_spawn
from ator.tools.base import Tool, ToolContext

__all__ = ["subagent_tools"]

_TEXT = {"type": "string", "maxLength": 20_000}
_NAMES = {"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 200}

SPAWN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 1, "maxLength": 200,
                  "description": "A few words naming the child's job."},
        "task": {**_TEXT, "minLength": 1,
                 "description": "The objective, with all context the child needs: it does "
                                "not see your conversation."},
        "deliverable": {**_TEXT, "description": "The expected shape of its final answer."},
        "boundaries": {**_TEXT, "description": "What is out of bounds."},
        "setup_id": {"type": "string", "maxLength": 64,
                     "description": "A setup from setup_list; default: yours."},
        "tools": {**_NAMES, "description": "Narrow the child's tools to these names."},
        "budget": {"type": "object", "additionalProperties": False, "properties": {
            "max_steps": {"type": "integer", "minimum": 1, "maximum": 10_000},
            "max_tokens": {"type": "integer", "minimum": 1},
            "max_usd": {"type": "number", "exclusiveMinimum": 0},
        }},
        "write_scope": {**_NAMES, "description": "Paths the child alone may change."},
    },
    "required": ["title", "task"],
    "additionalProperties": False,
}
_REF = {"type": "string", "minLength": 1, "maxLength": 64,
        "description": "The child's id or alias (from agent_spawn)."}


async def _spawn(args: dict[str, Any], ctx: ToolContext) -> Any:
    svc = ctx.service(Subagents)
    thread_id, turn_id = ctx.in_turn()
    return await svc.spawn(Scope(ctx.org_id), thread_id, turn_id, ctx.tool_use_id,
                           parse_spawn(args))


async def _status(args: dict[str, Any], ctx: ToolContext) -> Any:
    return await ctx.service(Subagents).status(Scope(ctx.org_id), ctx.in_turn()[0],
                                               args.get("id"))


async def _abort(args: dict[str, Any], ctx: ToolContext) -> Any:
    return await ctx.service(Subagents).abort(Scope(ctx.org_id), ctx.in_turn()[0],
                                              args["id"], args["reason"])


async def _result(args: dict[str, Any], ctx: ToolContext) -> Any:
    return await ctx.service(Subagents).result(Scope(ctx.org_id), ctx.in_turn()[0],
                                               args["id"], int(args.get("page", 1)))


async def _setups(args: dict[str, Any], ctx: ToolContext) -> Any:
    return await ctx.service(Subagents).setups(Scope(ctx.org_id))


def subagent_tools() -> list[Tool]:
    return [
        Tool("agent_spawn",
             "Delegate an independent task to a child agent that runs in parallel. Returns "
             "at once with its id and alias; its result arrives later by itself.",
             SPAWN_SCHEMA, _spawn, turn_only=True),
        Tool("agent_status", "The state of your subagents (or of one, by id or alias).",
             {"type": "object", "properties": {"id": _REF}, "additionalProperties": False},
             _status, read_only=True, turn_only=True),
        Tool("agent_abort", "Stop a subagent and its own subagents; no result will come.",
             {"type": "object", "properties": {"id": _REF, "reason": {
                 "type": "string", "minLength": 1, "maxLength": 500}},
              "required": ["id", "reason"], "additionalProperties": False}, _abort,
             turn_only=True),
        Tool("agent_result", "A subagent's full final text, one page at a time.",
             {"type": "object", "properties": {"id": _REF, "page": {
                 "type": "integer", "minimum": 1, "maximum": 100_000}},
              "required": ["id"], "additionalProperties": False},
             _result, read_only=True, origin="subagent", untrusted=True, turn_only=True),
        Tool("setup_list", "The setups (model, persona) a subagent can run with.",
             {"type": "object", "properties": {}, "additionalProperties": False}, _setups,
             read_only=True),
    ]
