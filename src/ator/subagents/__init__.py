"""Subagents: asynchronous delegation trees (layer: subagents, between engine and agent;
imports agent, tools, store, errors).

The engine wires it (`Ator.open`): the tools (`tools.py`), the service tools reach
(`service.Subagents`), the child's end (`service.Results`, a TurnEnd of the step writer),
the parent's between-steps injection (`service.result_injector`, agent/notices.py), the
child's budget (`service.ChildBudget`), and the stop cascade `Ator.stop` calls. The result's
format and its claim live in the store (`store/tree.py`), where the reaper's sweep uses them too.
"""
