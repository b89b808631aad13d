"""Prompt-cache hit ratio of a long tool session, with breakpoints placed as before this
change and as now (bench entry point; imports ator.agent.system_prompt, ator.providers.anthropic,
ator.testing.anthropic_wire).

    .venv/bin/python bench/prompt_cache.py [--iterations 60] [--result-kib 32]
        [--parallel 1] [--summary]

Builds each request the way the loop does (the turn's layers, the tools section, the whole
conversation so far) and the body the Anthropic adapter sends, then feeds it to the wire
fake's simulated prompt cache (`PromptCache`: Anthropic's rules — tools → system →
messages, a stored prefix per breakpoint, 20-block lookback). Prints, per placement, the
bytes per call and the cache-hit ratio: cache read ÷ all input tokens over the session.
`--summary` starts the conversation from a compaction summary (a user message marked
`summary`); `--parallel N` makes each step call N tools (N tool results in one message).
"""

from __future__ import annotations

import argparse
import copy
import json
import uuid
from collections.abc import Callable
from typing import Any

from ator.agent.caps import Caps
from ator.agent.state import TurnContext
from ator.agent.system_prompt import build_system, prompt_layers
from ator.providers.anthropic import build_params
from ator.providers.base import ModelRequest, ToolSpec
from ator.testing.anthropic_wire import PromptCache

Body = dict[str, Any]


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def legacy(body: Body) -> Body:
    """The placement before this change: the system prompt, the last tool, the last block of
    the last user message (no compaction summary)."""
    out: Body = _strip(copy.deepcopy(body))
    if out.get("system"):
        out["system"][-1]["cache_control"] = {"type": "ephemeral"}
    if out.get("tools"):
        out["tools"][-1]["cache_control"] = {"type": "ephemeral"}
    users = [m for m in out["messages"] if m["role"] == "user"]
    if users:
        users[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return out


def session(iterations: int, result_kib: int, parallel: int, summary: bool) -> list[Body]:
    ids = [uuid.uuid4() for _ in range(4)]
    turn = TurnContext(ids[0], ids[1], ids[2], ids[3], None, 0, "anthropic", "claude-x",
                       "You are a careful research assistant.", "Cite sources.", Caps(),
                       policy="Never share customer data.", policy_version=1)
    tools = [ToolSpec(f"tool_{i}", f"Tool number {i}: does thing {i}.",
                      {"type": "object", "properties": {"q": {"type": "string"}}})
             for i in range(8)]
    system, _ = build_system(prompt_layers(turn), tools)
    messages: list[dict[str, Any]] = []
    if summary:
        messages.append({"role": "user", "summary": True, "content": [
            {"type": "text", "text": "[summary] " + "earlier work. " * 2000}]})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": "Noted."}]})
    messages.append({"role": "user", "content": [{"type": "text", "text": "Research it."}]})
    bodies = []
    for i in range(iterations):
        request = ModelRequest(model=turn.model, messages=list(messages), system=system,
                               tools=tools)
        bodies.append(build_params(request))
        calls = [{"type": "tool_use", "id": f"t{i}_{j}", "name": "tool_0",
                  "input": {"q": f"step {i} part {j}"}} for j in range(parallel)]
        messages.append({"role": "assistant", "content": calls})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c["id"],
             "content": f"result {c['id']} " + "x" * (result_kib * 1024)} for c in calls]})
    return bodies


def measure(bodies: list[Body], place: Callable[[Body], Body]) -> dict[str, Any]:
    cache = PromptCache()
    read = total = 0
    sizes = []
    for body in bodies:
        sent = place(body)
        sizes.append(len(json.dumps(sent).encode()))
        usage = cache.usage(sent, 0)
        read += usage.cache_read_tokens
        total += usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    return {"calls": len(bodies), "bytes_per_call_avg": sum(sizes) // len(sizes),
            "bytes_per_call_max": max(sizes), "cache_hit_ratio": round(read / total, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--result-kib", type=int, default=32)
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--summary", action="store_true")
    args = parser.parse_args()
    bodies = session(args.iterations, args.result_kib, args.parallel, args.summary)
    print(json.dumps({"before": measure(bodies, legacy),
                      "after": measure(bodies, lambda body: body)}, indent=2))


if __name__ == "__main__":
    main()
