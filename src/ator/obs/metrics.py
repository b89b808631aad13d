"""Prometheus metrics of one process (layer: obs; imports prometheus_client).

Counters live per replica, as Prometheus expects (each replica is scraped); the mailbox
depth is read from the database at scrape time, so it is the same on every replica. The hub
gauges (waiters and channels on this process's shared subscription) are read at scrape time
too.
"""

from __future__ import annotations

from decimal import Decimal

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

__all__ = ["Metrics"]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.turns = Counter("ator_turns", "Turns ended, by status", ["status"], registry=r)
        self.steps = Counter("ator_steps", "Model calls made by turns", registry=r)
        self.tokens = Counter("ator_tokens", "Tokens by kind", ["kind"], registry=r)
        # Bound once: `labels()` takes a lock and builds a key on every call (per model call).
        self._token_kinds = tuple(self.tokens.labels(kind) for kind in
                                  ("input", "output", "cache_read", "cache_write"))
        self.usd = Counter("ator_cost_usd", "Spend in USD", registry=r)
        self.tool_calls = Counter("ator_tool_calls", "Tool calls by outcome", ["outcome"],
                                  registry=r)
        self.errors = Counter("ator_errors", "Turns that ended in error, by kind", ["kind"],
                              registry=r)
        self.mailbox_depth = Gauge("ator_mailbox_depth", "Mailbox items waiting for a turn",
                                   registry=r)
        self.mailbox_lag = Gauge("ator_mailbox_lag_seconds",
                                 "Age of the oldest mailbox item waiting for a turn", registry=r)
        self.turns_in_flight = Gauge("ator_turns_in_flight",
                                     "Turns (thread pumps) this process runs now", registry=r)
        self.turns_waiting = Gauge("ator_turns_waiting",
                                   "Threads woken on this process waiting for a turn slot",
                                   registry=r)
        self.loop_lag = Gauge("ator_loop_lag_seconds",
                              "Worst event-loop lateness of this process over the last 5 s",
                              registry=r)
        self.hub_waiters = Gauge("ator_hub_waiters",
                                 "Waiters (e.g. long-polls) on this process's shared subscription",
                                 registry=r)
        self.hub_channels = Gauge("ator_hub_channels",
                                  "Channels subscribed on this process's shared subscription",
                                  registry=r)

    def model_call(self, *, input: int, output: int, cache_read: int, cache_write: int,
                   usd: Decimal) -> None:
        self.steps.inc()
        for counter, amount in zip(self._token_kinds, (input, output, cache_read, cache_write),
                                   strict=True):
            counter.inc(amount)
        self.usd.inc(float(usd))

    def tool_call(self, *, is_error: bool) -> None:
        self.tool_calls.labels("error" if is_error else "ok").inc()

    def turn_ended(self, status: str, stop_reason: str) -> None:
        self.turns.labels(status).inc()
        if stop_reason.startswith("error:"):
            self.errors.labels(stop_reason.removeprefix("error:")).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
