"""The tools mounted for one step, and running them (layer: tools; imports jsonschema,
ator.tools.base, ator.tools.failure,
ator.tools.results, ator.errors, ator.memo).

`ToolRegistry.run_all` validates every call's input against its schema (an invalid input
becomes an `is_error` result carrying the validation message, never a silent `{}`), runs the
valid ones concurrently, each under its own timeout, and returns results in call order.
Cancelling the caller cancels every running tool. The registry is the one place a result is
cut to the turn's cap (`tools/results.py` decides how): longer results are stored and paged
when the step mounts `read_tool_result`, else cut with a visible marker. A failed call's
outcome carries a stable `meta["code"]` (unknown_tool, invalid_arguments, tool_timeout, the
raised error's code, or what the tool's own result says), for the audit of calls outside a turn.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from ator.errors import ConfigError
from ator.memo import ByIdentity
from ator.obs import tracing
from ator.providers.base import ToolSpec
from ator.tools.base import Tool, ToolCall, ToolContext, ToolOutcome, ToolResult
from ator.tools.failure import failure, timed_out
from ator.tools.results import READER, ResultBudget, StoredResults

__all__ = ["ToolRegistry", "truncate"]


def truncate(text: str, limit: int) -> tuple[str, int | None]:
    """Cut `text` to `limit` characters with a marker; returns (text, original length or None)."""
    if len(text) <= limit:
        return text, None
    return ResultBudget(limit).cut(text), len(text)


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


# Checking a schema against the meta-schema costs more than a whole turn's database work, and
# registries are built per turn: compiled validators are shared, by the schema's JSON text.
_VALIDATORS: OrderedDict[str, Draft202012Validator] = OrderedDict()
_VALIDATORS_MAX = 4096


# Long-lived tools (a process's native tools, a server's mounted MCP tools) come back as the
# same objects turn after turn: their validator and spec are kept by the tool itself, so a
# turn does not serialize every schema again to find them.
_BY_TOOL: ByIdentity[Tool, Any] = ByIdentity(4096)


def _validator(tool: Tool) -> Draft202012Validator:
    """The compiled validator of a tool's schema; ConfigError for an invalid schema."""
    validator: Draft202012Validator = _BY_TOOL.get(tool, _compile, "validator")
    return validator


def _compile(tool: Tool) -> Draft202012Validator:
    try:
        key = json.dumps(tool.input_schema, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"tool {tool.name!r} has an input schema that is not JSON") from exc
    found = _VALIDATORS.get(key)
    if found is not None:
        _VALIDATORS.move_to_end(key)
        return found
    try:
        Draft202012Validator.check_schema(tool.input_schema)
    except SchemaError as exc:
        raise ConfigError(
            f"tool {tool.name!r} has an invalid input schema: {exc.message}"
        ) from exc
    found = _VALIDATORS[key] = Draft202012Validator(tool.input_schema)
    while len(_VALIDATORS) > _VALIDATORS_MAX:
        _VALIDATORS.popitem(last=False)
    return found


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._validators: dict[str, Draft202012Validator] = {}
        # A step's calls are judged where hooks decide what to hold and again where they run:
        # the verdict is kept with the call object (frozen), for the last few calls only.
        self._judged: ByIdentity[ToolCall, str | None] = ByIdentity(64)
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        """Mount a tool. The same name with a different schema is an error, not an overwrite."""
        existing = self._tools.get(tool.name)
        if existing is not None:
            if existing.input_schema != tool.input_schema:
                raise ConfigError(f"two tools named {tool.name!r} with different schemas")
            return
        self._validators[tool.name] = _validator(tool)
        self._tools[tool.name] = tool

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def get(self, name: str) -> Tool | None:
        """The mounted tool of that name, if any."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self, *, description_limit: int = 4000) -> list[ToolSpec]:
        return [self._spec(tool, description_limit) for tool in self._tools.values()]

    @staticmethod
    def _spec(tool: Tool, description_limit: int) -> ToolSpec:
        def make(t: Tool) -> ToolSpec:
            return t.spec(truncate(t.description, description_limit)[0])

        spec: ToolSpec = _BY_TOOL.get(tool, make, ("spec", description_limit))
        return spec

    def validate(self, call: ToolCall) -> str | None:
        """The reason a call cannot run, or None when it can."""
        return self._judged.get(call, self._problem)

    def _problem(self, call: ToolCall) -> str | None:
        if call.name not in self._tools:
            known = ", ".join(sorted(self._tools)) or "none"
            return f"Unknown tool {call.name!r}. Available tools: {known}."
        if call.input is None:
            return f"The arguments for {call.name!r} were not valid JSON: {call.raw[:500]!r}"
        errors = sorted(
            self._validators[call.name].iter_errors(call.input), key=lambda e: list(e.path)
        )
        if errors:
            lines = []
            for err in errors[:5]:
                where = "/".join(str(p) for p in err.absolute_path) or "(root)"
                lines.append(f"- at {where}: {err.message}")
            return f"Invalid arguments for tool {call.name!r}:\n" + "\n".join(lines)
        return None

    async def run_all(
        self,
        calls: Sequence[ToolCall],
        ctx_for: Callable[[ToolCall], ToolContext],
        *,
        default_timeout: float,
        result_limit: int,
    ) -> list[ToolOutcome]:
        """Run calls concurrently; one outcome per call, in call order. `ctx_for(call)`
        builds each call's ToolContext."""
        if len(calls) == 1:  # nothing to run beside it: no task and gather around it
            call = calls[0]
            return [await self._run_one(call, ctx_for(call), default_timeout, result_limit)]
        tasks = [
            asyncio.ensure_future(self._run_one(c, ctx_for(c), default_timeout, result_limit))
            for c in calls
        ]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for t in tasks:
                t.cancel()
            raise

    async def _run_one(
        self, call: ToolCall, ctx: ToolContext, default_timeout: float, result_limit: int
    ) -> ToolOutcome:
        started = time.perf_counter()
        tool = self._tools.get(call.name)
        ctx = replace(ctx, result_chars=result_limit)
        budget = ResultBudget(result_limit)

        async def outcome(text: str, is_error: bool, untrusted: bool = False,
                          meta: Mapping[str, Any] | None = None) -> ToolOutcome:
            content, original = await self._shape(text, budget, ctx, call.name)
            ms = int((time.perf_counter() - started) * 1000)
            origin = tool.origin if tool is not None else "native"
            return ToolOutcome(call.id, call.name, content, is_error, ms, original,
                               untrusted, origin, meta or {})

        problem = self.validate(call)
        if problem is not None or tool is None:
            code = "unknown_tool" if tool is None else "invalid_arguments"
            return await outcome(problem or f"Unknown tool {call.name!r}.", True,
                                 meta={"code": code})
        timeout = tool.timeout if tool.timeout is not None else default_timeout
        assert call.input is not None
        try:
            with tracing.span(f"execute_tool {call.name}", {
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
                    "gen_ai.tool.call.id": call.id, "ator.tool.origin": tool.origin}):
                async with asyncio.timeout(timeout):
                    value = await tool.handler(call.input, ctx)
        except TimeoutError:
            value = timed_out(timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a tool's failure is data for the model, not a crash
            value = failure(exc, tool=call.name, untrusted=tool.untrusted)
        if isinstance(value, ToolResult):
            labelled = tool.untrusted if value.untrusted is None else value.untrusted
            return await outcome(value.text, value.is_error, labelled, value.meta)
        return await outcome(_render(value), False, tool.untrusted)

    async def _shape(self, text: str, budget: ResultBudget, ctx: ToolContext,
                     name: str) -> tuple[str, int | None]:
        """What the model reads of a result, and its full length when that is not all of
        it. Stored and paged when this step mounts the reader (inside a turn), cut with a
        marker otherwise."""
        if budget.fits(text):
            return text, None
        store = ctx.services.get(StoredResults)
        if (isinstance(store, StoredResults) and READER in self._tools and name != READER
                and budget.page_chars and ctx.thread_id is not None):
            ref = await store.stash(ctx, text)
            return budget.first_page(text, ref), len(text)
        return budget.cut(text), len(text)
