"""Name resolution for egress (layer: net; imports stdlib only).

The guard asks a `Resolver` once per request and connects only to what it answered, so the
resolver is the single place a name becomes addresses. `SystemResolver` uses the event loop's
getaddrinfo; `StaticResolver` is the in-package fake tests inject (it counts lookups, and can
answer differently on each one to play a rebinding attacker).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping, Sequence
from typing import Protocol

__all__ = ["Resolver", "StaticResolver", "SystemResolver"]


class Resolver(Protocol):
    async def resolve(self, host: str, port: int) -> list[str]:
        """The IP addresses `host` resolves to (as text), in connection order. Raises
        OSError when the name does not resolve."""
        ...


class SystemResolver:
    """getaddrinfo on the running loop (the default executor; never blocks the loop)."""

    async def resolve(self, host: str, port: int) -> list[str]:
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
        return list(dict.fromkeys(str(info[4][0]) for info in infos))


class StaticResolver:
    """Answers from a table: `{"name": ["10.0.0.1"]}`, or a sequence of answers per name to
    change what the name resolves to on each lookup (the last one repeats). `lookups` lists
    every name asked, in order."""

    def __init__(self, table: Mapping[str, Sequence[str] | Sequence[Sequence[str]]]) -> None:
        self._answers: dict[str, list[list[str]]] = {}
        for name, answer in table.items():
            if answer and not isinstance(answer[0], str):
                self._answers[name.lower()] = [list(a) for a in answer]
            else:
                self._answers[name.lower()] = [[str(a) for a in answer]]
        self.lookups: list[str] = []

    async def resolve(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        answers = self._answers.get(host.lower())
        if not answers:
            raise OSError(f"{host}: name does not resolve")
        return answers.pop(0) if len(answers) > 1 else answers[0]
