"""How a turn ended: its stop reason and the status a client can trust (layer: bottom;
imports nothing of ator).

The stop reason is the precise word (`end_turn`, `max_steps`, `cancelled:user`,
`error:auth`, …); the status is the coarse one a client branches on. `done` means the model
finished its answer and nothing else:

    status     stop reasons
    done       end_turn
    capped     max_steps, token_cap, timeout, stalled, max_tokens
    budget     budget
    refused    refusal
    waiting    held              (tool calls held for a person's decision: the thread is
                                  idle; the decision continues the conversation)
    stopped    cancelled:<who>   (user, shutdown, cascade, …)
    lost       error:lost        (the owning replica died or lost its lease)
    error      error:<kind>      (provider, config, internal, …)

`running` is the status of a turn that has not ended. Every status, with its meaning, is
here once; the store, the engine, the API and the CLI read it from this module.
"""

from __future__ import annotations

__all__ = ["CAP_REASONS", "STATUSES", "status_of"]

CAP_REASONS = frozenset({"max_steps", "token_cap", "timeout", "stalled", "max_tokens"})
STATUSES = ("running", "done", "capped", "budget", "refused", "waiting", "stopped", "lost",
            "error")


def status_of(stop_reason: str) -> str:
    """The status a turn that ended with `stop_reason` has."""
    if stop_reason in ("end_turn", "stop_sequence"):
        return "done"
    if stop_reason in CAP_REASONS:
        return "capped"
    if stop_reason == "budget":
        return "budget"
    if stop_reason == "refusal":
        return "refused"
    if stop_reason == "held":
        return "waiting"
    if stop_reason.startswith("cancelled:"):
        return "stopped"
    if stop_reason == "error:lost":
        return "lost"
    return "error"
