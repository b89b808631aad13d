"""Recorded outputs of the agent CLIs, in the shapes of their documented formats
(shared/notes/cli-runtime-formats.md): `claude -p --output-format stream-json --verbose
--include-partial-messages` and `codex exec --json`."""

from __future__ import annotations

from typing import Any

MODEL = "claude-sonnet-4-5-20250929"
SESSION = "5a0c1c1e-4b7f-4a0e-9d57-3f0d1a2b3c4d"
CLAUDE_COST = 0.0123


def _ev(event: dict[str, Any]) -> dict[str, Any]:
    return {"type": "stream_event", "event": event, "session_id": SESSION,
            "parent_tool_use_id": None, "uuid": "u"}


def _usage(inp: int, out: int, cw: int = 0, cr: int = 0) -> dict[str, int]:
    return {"input_tokens": inp, "cache_creation_input_tokens": cw,
            "cache_read_input_tokens": cr, "output_tokens": out}


INIT = {"type": "system", "subtype": "init", "cwd": "/w", "session_id": SESSION,
        "tools": ["Bash", "Read", "Edit"], "mcp_servers": [], "model": MODEL,
        "permissionMode": "default", "apiKeySource": "none", "slash_commands": []}


def message(mid: str, text: str, usage: dict[str, int]) -> list[dict[str, Any]]:
    """One API call answering `text`, streamed: deltas, then the complete block."""
    half = len(text) // 2
    return [
        _ev({"type": "message_start", "message": {"id": mid, "type": "message",
             "role": "assistant", "model": MODEL, "content": [], "usage": usage}}),
        _ev({"type": "content_block_start", "index": 0,
             "content_block": {"type": "text", "text": ""}}),
        _ev({"type": "content_block_delta", "index": 0,
             "delta": {"type": "text_delta", "text": text[:half]}}),
        _ev({"type": "content_block_delta", "index": 0,
             "delta": {"type": "text_delta", "text": text[half:]}}),
        _ev({"type": "content_block_stop", "index": 0}),
        {"type": "assistant", "message": {"id": mid, "type": "message", "role": "assistant",
         "model": MODEL, "content": [{"type": "text", "text": text}], "stop_reason": None,
         "usage": usage}, "parent_tool_use_id": None, "session_id": SESSION},
    ]


TOOL_CALL = [
    _ev({"type": "content_block_start", "index": 1, "content_block": {
        "type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {}}}),
    _ev({"type": "content_block_delta", "index": 1, "delta": {
        "type": "input_json_delta", "partial_json": "{\"command\": \"ls\"}"}}),
    _ev({"type": "content_block_stop", "index": 1}),
    {"type": "assistant", "message": {"id": "msg_01", "type": "message", "role": "assistant",
     "model": MODEL, "content": [{"type": "tool_use", "id": "toolu_01", "name": "Bash",
                                  "input": {"command": "ls"}}],
     "stop_reason": None, "usage": _usage(10, 30, 100)},
     "parent_tool_use_id": None, "session_id": SESSION},
    _ev({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
         "usage": {"output_tokens": 30}}),
    _ev({"type": "message_stop"}),
    {"type": "user", "message": {"role": "user", "content": [{
        "type": "tool_result", "tool_use_id": "toolu_01", "content": "README.md\n",
        "is_error": False}]}, "parent_tool_use_id": None, "session_id": SESSION},
]


def result(text: str = "Let me look. Done: one file.", *, subtype: str = "success",
           is_error: bool = False, cost: float | None = CLAUDE_COST) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "result", "subtype": subtype, "is_error": is_error, "duration_ms": 2100,
        "duration_api_ms": 1900, "num_turns": 2, "result": text, "session_id": SESSION,
        "usage": _usage(20, 50, 100, 100),
        "modelUsage": {MODEL: {"inputTokens": 20, "outputTokens": 50,
                               "cacheReadInputTokens": 100, "cacheCreationInputTokens": 100,
                               "costUSD": cost}},
        "permission_denials": []}
    if cost is not None:
        out["total_cost_usd"] = cost
    return out


def claude_turn() -> list[dict[str, Any]]:
    """A turn that runs `ls` itself and answers."""
    return [INIT, *message("msg_01", "Let me look.", _usage(10, 1, 100)), *TOOL_CALL,
            *message("msg_02", " Done: one file.", _usage(10, 20, 0, 100)),
            _ev({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                 "usage": {"output_tokens": 20}}),
            _ev({"type": "message_stop"}), result()]


THREAD = "0199a213-81c0-7800-8aa1-bbab2a035a53"


def codex_turn(cumulative: dict[str, int]) -> list[dict[str, Any]]:
    """A codex exec run: it lists files, writes one and answers; `turn.completed` carries
    the session's cumulative usage (as users report it)."""
    return [
        {"type": "thread.started", "thread_id": THREAD},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "item_0", "type": "reasoning",
                                            "text": "**Listing files**"}},
        {"type": "item.started", "item": {"id": "item_1", "type": "command_execution",
                                          "command": "bash -lc ls", "aggregated_output": "",
                                          "exit_code": None, "status": "in_progress"}},
        {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution",
                                            "command": "bash -lc ls",
                                            "aggregated_output": "README.md\n",
                                            "exit_code": 0, "status": "completed"}},
        {"type": "item.completed", "item": {"id": "item_2", "type": "file_change",
                                            "changes": [{"path": "notes.md", "kind": "add"}],
                                            "status": "completed"}},
        {"type": "item.updated", "item": {"id": "item_3", "type": "agent_message",
                                          "text": "One file:"}},
        {"type": "item.completed", "item": {"id": "item_3", "type": "agent_message",
                                            "text": "One file: README.md."}},
        {"type": "turn.completed", "usage": cumulative},
    ]
