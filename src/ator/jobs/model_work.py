"""Model work outside a turn, through the budget ledger (layer: jobs — the kernel for work
beyond a turn; imports cost, providers, security, store, errors, usage, whole).

An analysis (later other background work) calls a model with no thread and no turn.
`ModelWork.call` gives it what a turn's model call gets, from the same pieces:

1. the call's worst case (cost/estimate.py: the request's estimated input at the dearest
   input price plus `max_tokens` of output) is reserved against the org's monthly budget by
   the ledger's one rule (`ledger.reserve_work`, the same statement text a turn's
   reservation uses); one that does not fit raises `BudgetRefused` before any money is
   spent, and so does an unpriced model for an org with a limit (`fail_closed`);
2. the provider is built by the engine's provider registry (`ProviderRegistry.lease`, the
   same factories, secret references resolved from the org's encrypted secrets, the egress
   guard under every HTTP client);
3. the call is billed and its reservation released in the statement that records it
   (`ledger.settle_work`: a `model_calls` row under the work's label, its usage priced by
   the price table, or the provider's own figure); a call that fails or is cut short is
   billed with what it consumed (`UsageMeter`) and the error goes on to the caller.

Reservations and settles run `whole` (ator.whole): a cancellation (the job's timeout) lands
after them, never between the statement and what the caller knows of it.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ator.cost.estimate import worst_case_usd
from ator.cost.prices import Priced, PriceTable
from ator.errors import BudgetExceeded
from ator.providers.base import (
    MessageStop,
    ModelRequest,
    SystemBlock,
    TextDelta,
    UsageMeter,
)
from ator.providers.registry import ProviderRegistry
from ator.providers.size import request_tokens
from ator.security.crypto import MasterKey
from ator.store import ledger
from ator.store import secrets as secret_store
from ator.store.database import Database
from ator.store.scope import Scope
from ator.store.turns import ModelCallRow
from ator.usage import Usage
from ator.whole import whole

__all__ = ["BudgetRefused", "ModelWork", "WorkCall", "WorkResult"]


class BudgetRefused(BudgetExceeded):
    """The org's monthly budget cannot cover the call's worst case (nothing was spent)."""

    code = "budget_refused"


@dataclass(frozen=True, slots=True)
class WorkCall:
    """One model call outside a turn. `label` names it in `model_calls.purpose` and in the
    reservation (an analysis: `analysis:<kind>`)."""

    label: str
    provider: str
    model: str
    prompt: str
    system: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    max_tokens: int = 1024
    temperature: float | None = None


@dataclass(frozen=True, slots=True)
class WorkResult:
    text: str
    usage: Usage
    cost_usd: Decimal
    priced: bool
    model: str
    stop_reason: str
    call_id: int | None
    duration_ms: int


class ModelWork:
    def __init__(
        self, db: Database, providers: ProviderRegistry, prices: PriceTable,
        master_key: MasterKey, *, fail_closed: bool = True, hold_ttl: float = 900.0,
    ) -> None:
        self.db = db
        self.providers = providers
        self.prices = prices
        self.master_key = master_key
        self.fail_closed = fail_closed
        self.hold_ttl = hold_ttl  # a holder that never settles is swept after this

    def request(self, scope: Scope, call: WorkCall) -> ModelRequest:
        return ModelRequest(
            model=call.model,
            messages=[{"role": "user", "content": [{"type": "text", "text": call.prompt}]}],
            system=[SystemBlock(call.system, name="analysis")] if call.system else [],
            max_tokens=call.max_tokens, temperature=call.temperature, cache=False,
            org_id=str(scope.org_id))

    async def call(self, scope: Scope, call: WorkCall) -> WorkResult:
        """Reserve, call, bill. Raises BudgetRefused (nothing spent), ConfigError or
        SecretError (the provider cannot be built; the reservation is given back) or
        ProviderError (billed with what the call consumed)."""
        request = self.request(scope, call)
        worst = worst_case_usd(self.prices, call.model, request_tokens(request),
                               call.max_tokens)
        work_id = uuid.uuid4()
        held = await whole(ledger.reserve_work(self.db, scope, work_id, worst or Decimal(0),
                                               label=call.label, ttl=self.hold_ttl))
        if not held.held:
            raise BudgetRefused(held.refusal(worst or Decimal(0)))
        if worst is None and held.limit_usd is not None and self.fail_closed:
            await whole(ledger.settle_work(self.db, scope, work_id, label=call.label,
                                           call=None))
            raise BudgetRefused("the model has no price, so spend against the budget "
                                "cannot be measured")

        async def resolve(name: str) -> str:
            return await secret_store.reveal(self.db, self.master_key, scope, name)

        meter = UsageMeter()
        parts: list[str] = []
        stop = "end_turn"
        started = time.monotonic()
        billed = False
        try:
            async with self.providers.lease(call.provider, call.config, resolve) as provider:
                async for event in provider.stream(request):
                    meter.observe(event)
                    if isinstance(event, TextDelta):
                        parts.append(event.text)
                    elif isinstance(event, MessageStop):
                        stop = event.stop_reason
            result = self._row(call, meter, stop, started)
            billed = True  # a settle that fails is not tried twice: the sweep frees it
            call_id = await whole(ledger.settle_work(self.db, scope, work_id,
                                                     label=call.label, call=result))
        finally:
            if not billed:  # failed or cut: bill what it consumed, give the rest back
                consumed = self._row(call, meter, "error", started)
                await whole(ledger.settle_work(
                    self.db, scope, work_id, label=call.label,
                    call=consumed if meter.usage().total_tokens or meter.cost_usd else None))
        return WorkResult("".join(parts), meter.usage(), result.cost_usd, result.priced,
                          result.model, stop, call_id, result.duration_ms)

    def _row(self, call: WorkCall, meter: UsageMeter, stop: str,
             started: float) -> ModelCallRow:
        usage = meter.usage()
        model = meter.model or call.model
        priced = (Priced.reported(meter.cost_usd) if meter.cost_usd is not None
                  else self.prices.cost(call.model, usage))
        return ModelCallRow(
            step=0, provider=call.provider, model=model, stop_reason=stop,
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens, usage_reported=usage.reported,
            cost_usd=priced.usd, priced=priced.priced,
            duration_ms=int((time.monotonic() - started) * 1000),
            request_meta={"label": call.label, "max_tokens": call.max_tokens},
            purpose=call.label, usage_estimated=usage.estimated, cost_source=priced.source)
