"""The analysis kinds ator ships, each with its eval set (layer: analyses; imports
ator.analyses.kind, ator.analyses.inputs, ator.analyses.validate).

Every org may run them (`Analyses.trigger(scope, "thread_summary", thread_id)`); their
model is the process default (`builtin_kinds(provider, model)`). Their eval sets are fixed
model replies with what the validator must do with each, run in CI (tests/test_evals.py
through `ator eval run --ci`): changing a validator so that a case no longer gets its
expected verdict fails the build.
"""

from __future__ import annotations

from typing import Any

from ator.analyses.inputs import thread
from ator.analyses.kind import AnalysisKind, EvalCase
from ator.analyses.validate import Length, Reference, Vocabulary

__all__ = ["builtin_kinds"]

_LONG = "x" * 700


def _first_user_text(data: dict[str, Any]) -> str:
    for m in data.get("messages", []):
        if m.get("role") == "user" and m.get("text"):
            return str(m["text"])
    return ""


def _summary_rule(data: dict[str, Any]) -> dict[str, Any]:
    return {"summary": _first_user_text(data)[:500], "topics": []}


def _sentiment_rule(data: dict[str, Any]) -> dict[str, Any]:
    return {"sentiment": "neutral", "confidence": 0.0}


def _action_rule(data: dict[str, Any]) -> dict[str, Any]:
    return {"action": "wait", "reason": "no model answer; waiting for a person", "refs": []}


def builtin_kinds(provider: str, model: str) -> list[AnalysisKind]:
    msgs = {"messages": [{"role": "user", "text": "my order is late"}]}
    return [
        AnalysisKind(
            name="thread_summary", input=thread(30), provider=provider, model=model,
            system="You summarize support conversations. Answer with one JSON object.",
            prompt='Summarize this conversation as {"summary": "...", "topics": ["..."]}:\n'
                   "{{input}}",
            schema={"type": "object", "required": ["summary", "topics"],
                    "properties": {"summary": {"type": "string", "maxLength": 500},
                                   "topics": {"type": "array", "maxItems": 5,
                                              "items": {"type": "string", "maxLength": 40}}}},
            validators=(Length("summary", 500), Length("topics", 5)), rule=_summary_rule,
            max_tokens=400,
            evals=(
                EvalCase("plain", '{"summary": "Late order.", "topics": ["shipping"]}',
                         "accept", msgs),
                EvalCase("long summary is cut", '{"summary": "' + _LONG + '", "topics": []}',
                         "cut", msgs),
                EvalCase("too many topics are cut",
                         '{"summary": "s", "topics": ["a","b","c","d","e","f","g"]}', "cut",
                         msgs, {"summary": "s", "topics": ["a", "b", "c", "d", "e"]}),
                EvalCase("missing summary is rejected", '{"topics": []}', "reject", msgs),
                EvalCase("prose is unparseable", "The user is unhappy.", "unparseable", msgs),
            )),
        AnalysisKind(
            name="thread_sentiment", input=thread(20), provider=provider, model=model,
            system="You rate the customer's sentiment. Answer with one JSON object.",
            prompt='Rate as {"sentiment": "positive|neutral|negative", "confidence": 0..1}:\n'
                   "{{input}}",
            schema={"type": "object", "required": ["sentiment", "confidence"],
                    "properties": {"sentiment": {"enum": ["positive", "neutral", "negative"]},
                                   "confidence": {"type": "number", "minimum": 0,
                                                  "maximum": 1}}},
            validators=(Vocabulary("sentiment", ("positive", "neutral", "negative"),
                                   on_miss="reject"),),
            rule=_sentiment_rule, max_tokens=100,
            evals=(
                EvalCase("plain", '{"sentiment": "negative", "confidence": 0.9}', "accept",
                         msgs),
                EvalCase("case is cleaned", '{"sentiment": " Negative ", "confidence": 0.8}',
                         "clean", msgs, {"sentiment": "negative", "confidence": 0.8}),
                EvalCase("outside the vocabulary", '{"sentiment": "furious", '
                         '"confidence": 0.9}', "reject", msgs),
                EvalCase("confidence out of range", '{"sentiment": "neutral", '
                         '"confidence": 7}', "reject", msgs),
                EvalCase("fenced JSON is read", '```json\n{"sentiment": "positive", '
                         '"confidence": 0.5}\n```', "accept", msgs),
            )),
        AnalysisKind(
            name="next_action", input=thread(20), provider=provider, model=model,
            system="You suggest the next action on a support thread. Answer with JSON.",
            prompt='Suggest {"action": "reply|escalate|close|wait", "reason": "...", '
                   '"refs": [ids of messages you rely on]}:\n{{input}}',
            schema={"type": "object", "required": ["action", "reason", "refs"],
                    "properties": {"action": {"enum": ["reply", "escalate", "close", "wait"]},
                                   "reason": {"type": "string", "maxLength": 200},
                                   "refs": {"type": "array", "items": {"type": "string"}}}},
            validators=(Vocabulary("action", ("reply", "escalate", "close", "wait"),
                                   on_miss="reject"),
                        Length("reason", 200),
                        Reference("refs", within="message_ids", on_miss="drop")),
            rule=_action_rule, max_tokens=200,
            evals=(
                EvalCase("plain", '{"action": "reply", "reason": "asked", "refs": ["m1"]}',
                         "accept", {**msgs, "message_ids": ["m1", "m2"]}),
                EvalCase("spelling is cleaned", '{"action": "Escalate", "reason": "r", '
                         '"refs": []}', "clean", msgs),
                EvalCase("an unknown action is rejected", '{"action": "refund", '
                         '"reason": "r", "refs": []}', "reject", msgs),
                EvalCase("a long reason is cut", '{"action": "wait", "reason": "'
                         + "y" * 300 + '", "refs": []}', "cut", msgs),
                EvalCase("an invented reference is dropped", '{"action": "close", '
                         '"reason": "r", "refs": ["m1", "m9"]}', "clean",
                         {**msgs, "message_ids": ["m1"]},
                         {"action": "close", "reason": "r", "refs": ["m1"]}),
            )),
    ]
