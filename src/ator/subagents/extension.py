"""Subagents as an extension of the engine (layer: subagents; imports agent, subagents.*,
store.tree).

What it contributes: the native tools (`agent_spawn`, …), the service they reach
(`Subagents`), a per-turn field (the turn's place in its tree, `SubagentTurn`, which also
bounds a child's tools by its parent's), its caps (`SubagentCaps`), two loop hooks (results
between steps, the child's budget) and a turn end (the child's result to its parent).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ator.agent.caps import CapGroup
from ator.agent.extension import Extension, Kernel, TurnEnd, TurnField
from ator.agent.hooks import LoopHook
from ator.store.tree import TURN_SQL
from ator.subagents.caps import SubagentTurn
from ator.subagents.service import ChildBudget, Results, Subagents, result_injector
from ator.subagents.tools import subagent_tools
from ator.tools.base import Tool

__all__ = ["SubagentsExtension"]


class SubagentsExtension(Extension):
    name = "subagents"

    def __init__(self, kernel: Kernel) -> None:
        self.service = Subagents(kernel.db, kernel.waker,
                                 ceilings=kernel.settings.cap_ceilings)
        self._prices = kernel.prices

    def tools(self) -> Sequence[Tool]:
        return subagent_tools()

    def hooks(self) -> Sequence[LoopHook]:
        return [result_injector(self.service), ChildBudget(self.service, self._prices)]

    def ends(self) -> Sequence[TurnEnd]:
        return [Results(self.service)]

    def fields(self) -> Sequence[TurnField]:
        return [TurnField("subagent", TURN_SQL, SubagentTurn.build)]

    def caps(self) -> Sequence[CapGroup]:
        return [self.service.caps]

    def services(self) -> Mapping[type, object]:
        return {Subagents: self.service}
