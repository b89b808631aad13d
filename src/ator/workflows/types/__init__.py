"""The built-in step types, one module each (layer: workflows; imports ator.workflows.*).

`builtin_types()` is what the extension registers unless told otherwise; a type that needs
a peer (the engine's turns for `agent`, the egress guard for `http`) is given it there.
"""

from __future__ import annotations

from ator.agent.extension import Asker
from ator.net.egress import Egress
from ator.security.crypto import MasterKey
from ator.workflows.step_types import StepType
from ator.workflows.types.agent import Agent
from ator.workflows.types.http import Http
from ator.workflows.types.human import Human
from ator.workflows.types.loop import Loop
from ator.workflows.types.map import Map
from ator.workflows.types.switch import Switch
from ator.workflows.types.tournament import Tournament
from ator.workflows.types.transform import Transform
from ator.workflows.types.verify import Verify
from ator.workflows.types.wait import Wait

__all__ = ["Agent", "Http", "Human", "Loop", "Map", "Switch", "Tournament", "Transform",
           "Verify", "Wait", "builtin_types"]


def builtin_types(*, asker: Asker | None = None, egress: Egress | None = None,
                  master_key: MasterKey | None = None) -> list[StepType]:
    """The built-in types (a type whose peer is not given refuses to run)."""
    return [Transform(), Wait(), Map(), Switch(), Agent(asker), Http(egress, master_key),
            Verify(), Loop(), Tournament(), Human()]
