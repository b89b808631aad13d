"""How a tool's failure reads (issue 17, D6): the model and the user get `code: sentence`,
the code stable and typed, never a Python class name, whoever raised it (a typed ator error,
a bug in the tool, a timeout, a real subagent spawn naming no setup)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from ator.errors import ToolError, ValidationFailed
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.tools.base import Tool, ToolContext
from tests.conftest import new_thread

_CLASS_NAME = re.compile(r"\b[A-Z][a-z]+(?:[A-Z][a-z]+)+\b|Error\b|Failed\b|Exception\b")


async def _typed(args: dict[str, Any], ctx: ToolContext) -> str:
    raise ValidationFailed("setup not found or archived", code="invalid_setup")


async def _plain(args: dict[str, Any], ctx: ToolContext) -> str:
    raise ToolError("page 3 does not exist")


async def _bug(args: dict[str, Any], ctx: ToolContext) -> str:
    raise KeyError("missing")


async def _silent_bug(args: dict[str, Any], ctx: ToolContext) -> str:
    raise RuntimeError


@pytest.mark.parametrize(("handler", "expected"), [
    (_typed, "invalid_setup: setup not found or archived"),
    (_plain, "tool_error: page 3 does not exist"),
    (_bug, "internal_error: 'missing'"),
    (_silent_bug, "internal_error: the tool failed without saying why"),
], ids=["typed", "tool-error", "bug", "bug-without-message"])
async def test_a_tool_failure_reads_as_a_code_and_a_sentence(
        make_ator: Any, handler: Any, expected: str) -> None:
    provider = ScriptedProvider([ScriptStep(tool_calls=[("lookup", {})]), ScriptStep(text="ok")])
    provider.record_requests = True
    tool = Tool("lookup", "Looks up.", {"type": "object", "properties": {}}, handler)
    async with make_ator(providers={"s": provider}, tools=[tool]) as ator:
        scope, thread = await new_thread(ator, "s")
        await ator.ask(scope, thread.id, "go", timeout=10)
        sent = provider.requests[1].messages[-1]["content"][0]
        assert (sent["is_error"], sent["content"]) == (True, expected)
        stored = [r for e in await ator.events(scope, thread.id) if e.kind == "tool_results"
                  for r in e.data["results"]]
        assert [r["content"] for r in stored] == [expected]
        assert not _CLASS_NAME.search(expected)


async def test_agent_spawn_on_a_missing_setup_reads_without_a_class_name(make_ator: Any) -> None:
    missing = str(uuid.uuid4())
    provider = ScriptedProvider([
        ScriptStep(tool_calls=[("agent_spawn", {"title": "t", "task": "do it",
                                                "setup_id": missing})]),
        ScriptStep(text="ok")])
    provider.record_requests = True
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s")
        await ator.ask(scope, thread.id, "spawn", timeout=20)
        sent = provider.requests[1].messages[-1]["content"][0]
        assert sent["is_error"] is True
        assert sent["content"] == "invalid_setup: setup not found or archived", sent["content"]
