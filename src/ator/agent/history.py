"""Rebuilding the model's view of a thread from its events (layer: agent; imports
providers.base, tools.base).

Postgres is the truth: every turn rebuilds its messages from the event log, never from
process memory. The rules:

- `message` events are the user's words; consecutive user content merges into one message
  (everything that arrived while the thread was busy is one next turn).
- `notification` events (subagent results, system notices) reach the model as user content
  wrapped and labelled as untrusted data.
- `assistant` events are the model's messages; `tool_results` answer the tool calls of the
  assistant message before them (untrusted results labelled as data). An assistant event
  marked `interrupted` is the partial reply of a turn that was cut short: its text is kept,
  its unfinished tool calls are not.
- A turn that did not finish (stopped, lost, capped, failed) is followed by a short note from
  ator in the next user message, so the model knows the previous request was cut short and
  by what, and does not redo it unasked.
- A tool call left without a result (the turn died, was stopped, or hit a cap between the
  call and its result) gets a synthetic `is_error` result, so the history stays valid for
  every provider and the model learns what happened.
- A call a hook *held* (the turn ended `waiting`, its `turn_ended` lists it under `held`)
  stays open across the turn's end: the `tool_results` a decision puts in the mailbox
  answer it in the same user message as its siblings' results. If something else comes
  first (the user wrote meanwhile), the held call is answered "awaiting a decision" there,
  and its later result reaches the model as a text note. Never a tool_use without a result.
- A `compaction` event replaces every event up to its `through_seq` with its summary: the
  history is the latest summary (a user message marked `"summary": True`) followed by the
  events after `through_seq` (records carry `seq` for this). The cut always falls before an
  assistant message, so the summary is followed by the assistant.
- Each assistant message carries `"seq"` (of its event) when the records have one, so a
  later compaction can name where it cuts. Adapters send only role and content.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ator.providers.base import Block, Message
from ator.tools.base import result_block, untrusted

__all__ = ["build_messages", "injected_blocks", "interruption_note", "summary_message"]

_UNFINISHED = {
    "stopped": "was stopped ({who}) before it finished",
    "lost": "was interrupted (the server running it stopped) before it finished",
    "capped": "ended at a limit ({reason}) before it finished",
    "budget": "ended because the budget was spent",
    "error": "failed ({reason})",
}


def interruption_note(ended: dict[str, Any]) -> str | None:
    """What the model is told about a previous turn that did not finish, or None."""
    status = str(ended.get("status", ""))
    reason = str(ended.get("stop_reason", ""))
    if status not in _UNFINISHED:
        return None
    who = reason.split(":", 1)[1] if ":" in reason else reason
    what = _UNFINISHED[status].format(who=f"by {who}" if who != "user" else "by the user",
                                      reason=reason)
    return (f"[ator] Your previous turn {what}. Do not redo that work unless the user asks; "
            "answer what follows.")


def injected_blocks(records: Iterable[dict[str, Any]]) -> list[Block]:
    """User-content blocks for injected `notification` records, labelled as data."""
    return [
        {"type": "text", "text": untrusted(str(r["data"].get("source", "system")),
                                           str(r["data"].get("text", "")))}
        for r in records if r["kind"] == "notification"
    ]


def summary_message(text: str) -> Message:
    """The user message that stands for the compacted part of a conversation."""
    return {"role": "user", "summary": True, "content": [{
        "type": "text",
        "text": "<summary of the earlier conversation, written by ator's compaction>\n"
                f"{text}\n</summary>"}]}


def _compacted(events: list[dict[str, Any]]) -> tuple[Message | None, list[dict[str, Any]]]:
    """The latest summary, and the records it does not replace (in order)."""
    latest = next((e for e in reversed(events) if e["kind"] == "compaction"), None)
    if latest is None:
        return None, events
    through = int(latest["data"].get("through_seq", 0))
    rest = [e for e in events if e["kind"] != "compaction" and int(e.get("seq", 0)) > through]
    return summary_message(str(latest["data"].get("summary", ""))), rest


def _user_blocks(data: dict[str, Any]) -> list[Block]:
    content = data.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict) and b.get("type") == "text"]
    text = data.get("text")
    return [{"type": "text", "text": str(text)}] if text else []


def build_messages(events: Iterable[dict[str, Any]]) -> list[Message]:
    """Turn `{"kind", "data"}` records (in seq order, with `seq` when a compaction is among
    them) into alternating user/assistant messages."""
    summary, records = _compacted(list(events))
    messages: list[Message] = [summary] if summary is not None else []
    pending_calls: dict[str, str] = {}  # tool_use id -> name, awaiting a result
    held: dict[str, str] = {}  # held by a hook when its turn ended: answered by a decision
    answered_held: set[str] = set()  # held calls closed as "awaiting" before their result
    note: str | None = None  # about the last turn, told before the next user content

    def push(role: str, blocks: list[Block], seq: Any = None) -> None:
        nonlocal note
        if not blocks:
            return
        if role == "user" and note is not None:
            blocks = [{"type": "text", "text": note}, *blocks]
            note = None
        if messages and messages[-1]["role"] == role and not messages[-1].get("summary"):
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": list(blocks)})
            if role == "assistant" and seq is not None:
                messages[-1]["seq"] = seq

    def close_dangling(reason: str) -> None:
        if held:
            push("user", [
                {"type": "tool_result", "tool_use_id": tid, "is_error": True,
                 "content": f"Tool {name!r} has not run yet: it awaits a person's decision. "
                            "Its outcome will be told to you when it is decided."}
                for tid, name in held.items()
            ])
            answered_held.update(held)
            held.clear()
        if pending_calls:
            push("user", [
                {"type": "tool_result", "tool_use_id": tid, "is_error": True,
                 "content": f"Tool {name!r} did not return: {reason}."}
                for tid, name in pending_calls.items()
            ])
            pending_calls.clear()

    for ev in records:
        kind, data = ev["kind"], ev["data"]
        if kind == "message":
            close_dangling("the turn ended before the tool finished")
            push("user", _user_blocks(data))
        elif kind == "notification":
            close_dangling("the turn ended before the tool finished")
            push("user", injected_blocks([ev]))
        elif kind == "assistant":
            close_dangling("the turn ended before the tool finished")
            interrupted = bool(data.get("interrupted"))
            blocks = [b for b in data.get("content", []) if _sendable(b, interrupted)]
            push("assistant", blocks, ev.get("seq"))
            for b in blocks:
                if b["type"] == "tool_use":
                    pending_calls[b["id"]] = b["name"]
        elif kind == "tool_results":
            every = data.get("results", [])
            results = [r for r in every if r.get("tool_use_id") in pending_calls
                       or r.get("tool_use_id") in held]
            for r in results:
                pending_calls.pop(r["tool_use_id"], None)
                held.pop(r["tool_use_id"], None)
            late = [r for r in every if r.get("tool_use_id") in answered_held]
            answered_held.difference_update(r["tool_use_id"] for r in late)
            push("user", [result_block(r) for r in results] + [_late(r) for r in late])
        elif kind == "turn_ended":
            kept = {str(h.get("tool_use_id")) for h in data.get("held") or ()}
            waiting = {tid: pending_calls.pop(tid) for tid in kept & pending_calls.keys()}
            close_dangling(f"the turn ended ({data.get('stop_reason', 'unknown')})")
            held.update(waiting)
            note = interruption_note(data)
    close_dangling("the turn ended before the tool finished")
    # A history must start with the user; drop a leading assistant message if any.
    while messages and messages[0]["role"] != "user":
        messages.pop(0)
    return messages


def _late(record: dict[str, Any]) -> Block:
    """A held call's result that came after the call was answered "awaiting": a note."""
    block = result_block(record)
    what = "failed or was refused" if block["is_error"] else "ran"
    return {"type": "text", "text": f"[ator] Your held call {record.get('name')!r} "
            f"({record['tool_use_id']}) was decided and {what}; its result:\n"
            f"{block['content']}"}


def _sendable(block: dict[str, Any], interrupted: bool) -> bool:
    t = block.get("type")
    if t == "text":
        return bool(block.get("text"))
    if interrupted:
        # A cut-short reply's tool calls never ran, and its thinking has no signature.
        return False
    return t in ("tool_use", "thinking")
