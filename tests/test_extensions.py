"""An extension defined here, without editing `agent/` or `store/turns.py`, adds a per-turn
field (read in the turn's start statement), a cap (set in a setup's `config.caps`, refused
when unknown or above its operator ceiling) and a turn-end part (in the turn's final write),
and is reached through `Ator.service(Kind)` (issue 18)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import sqlalchemy as sa

from ator import Scope
from ator.agent.caps import CapGroup
from ator.agent.extension import Extension, Kernel, TurnEnd, TurnField
from ator.agent.hooks import LoopHook
from ator.agent.state import TurnContext, TurnState
from ator.engine.root import DEFAULT_EXTENSIONS
from ator.errors import ValidationFailed
from ator.providers.base import ModelRequest
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.store import turns as turn_store
from ator.store.parts import PartSql
from ator.store.records import Principal
from tests.conftest import operator_client


@dataclass(frozen=True, slots=True)
class StampCaps:
    max_stamps: int = 2


@dataclass(frozen=True, slots=True)
class TitleSeen:
    """Per-turn state: the thread's title, read in the start statement."""

    title: str


_STAMP = PartSql("stamp", ctes=(
    "_stamp AS (UPDATE orgs SET settings = settings || jsonb_build_object("
    "'stamp', CAST(:stamp AS text)) WHERE id = :org RETURNING id)",),
    selects=("(SELECT count(*) FROM _stamp) AS stamped",), params=frozenset({"stamp", "org"}))


@dataclass(frozen=True, slots=True)
class StampPart:
    """A step part: the turn's final write also stamps the org's settings (a real write in
    the same statement; not the thread's row, which the step's event append updates)."""

    org_id: uuid.UUID
    stamp: str
    sql: ClassVar[PartSql] = _STAMP

    def values(self) -> dict[str, Any]:
        return {"stamp": self.stamp, "org": self.org_id}


class Stamps:
    """The extension's service, reached by type."""

    def __init__(self) -> None:
        self.seen: list[tuple[str | None, int]] = []
        self.committed: list[int] = []


class StampHook(LoopHook):
    def __init__(self, stamps: Stamps) -> None:
        self.stamps = stamps

    async def before_call(self, turn: TurnContext, state: TurnState,
                          request: ModelRequest) -> ModelRequest:
        seen, caps = turn.get(TitleSeen), turn.get(StampCaps)
        assert caps is not None
        self.stamps.seen.append((seen.title if seen else None, caps.max_stamps))
        return request


class StampEnd:
    def __init__(self, stamps: Stamps) -> None:
        self.stamps = stamps

    def parts(self, turn: TurnContext, state: TurnState,
              finish: turn_store.Finished) -> Sequence[turn_store.StepPart]:
        seen, caps = turn.get(TitleSeen), turn.get(StampCaps)
        assert seen is not None and caps is not None
        return [StampPart(turn.org_id, f"{seen.title}x{caps.max_stamps}")]

    async def committed(self, turn: TurnContext, write: turn_store.StepWrite) -> None:
        self.stamps.committed.append(int(write.extra["stamped"]))


class StampExtension(Extension):
    name = "stamps"

    def __init__(self, kernel: Kernel) -> None:
        self.stamps = Stamps()

    def fields(self) -> Sequence[TurnField]:
        return [TurnField("title_seen", "t.title", lambda v: TitleSeen(str(v)))]

    def caps(self) -> Sequence[CapGroup]:
        return [CapGroup(StampCaps, StampCaps(max_stamps=5))]  # the operator's ceiling: 5

    def hooks(self) -> Sequence[LoopHook]:
        return [StampHook(self.stamps)]

    def ends(self) -> Sequence[TurnEnd]:
        return [StampEnd(self.stamps)]

    def services(self) -> Mapping[type, object]:
        return {Stamps: self.stamps}


async def test_an_extension_adds_a_turn_field_a_cap_and_a_turn_end(make_ator) -> None:
    scripted = ScriptedProvider([ScriptStep(text="hello")])
    async with make_ator(providers={"s": scripted}, extensions=(*DEFAULT_EXTENSIONS,
                                                                StampExtension)) as ator:
        org = await ator.create_org("stamps")
        scope = Scope(org.id)
        # The cap is known, checked and ceiled like the loop's own.
        with pytest.raises(ValidationFailed) as above:
            await ator.create_setup(scope, name="x", provider="s", model="scripted",
                                    config={"caps": {"max_stamps": 6}})
        assert above.value.code == "cap_above_ceiling" and "max_stamps" in above.value.message
        with pytest.raises(ValidationFailed) as unknown:
            await ator.create_setup(scope, name="x", provider="s", model="scripted",
                                    config={"caps": {"max_stampz": 1}})
        assert "unknown cap 'max_stampz'" in unknown.value.message
        assert "max_stamps" in unknown.value.message  # listed among the known
        setup = await ator.create_setup(scope, name="x", provider="s", model="scripted",
                                        config={"caps": {"max_stamps": 4}})
        thread = await ator.create_thread(scope, setup.id, title="Ledger")
        result = await ator.ask(scope, thread.id, "hi", timeout=30)
        assert result.status == "done" and result.text == "hello"
        stamps = ator.service(Stamps)
        assert stamps.seen == [("Ledger", 4)]  # the field and the cap reached the hook
        assert stamps.committed == [1]  # the part ran in the final write
        rows = await ator.db.fetch(sa.text("SELECT settings FROM orgs WHERE id = :id"),
                                   {"id": org.id}, write=False)
        assert rows[0]["settings"]["stamp"] == "Ledgerx4"
        # The snapshot records the extension's cap with the loop's.
        (turn,) = await ator.turns(scope, thread.id)
        assert turn.config_snapshot["caps"]["max_stamps"] == 4


async def test_without_the_extension_its_cap_is_unknown(make_ator) -> None:
    async with make_ator(providers={"s": ScriptedProvider([])}) as ator:
        org = await ator.create_org("plain")
        with pytest.raises(ValidationFailed, match="unknown cap 'max_stamps'"):
            await ator.create_setup(Scope(org.id), name="x", provider="s", model="scripted",
                                    config={"caps": {"max_stamps": 1}})


class Counter:
    def __init__(self) -> None:
        self.hits = 0


class CounterExtension(Extension):
    """A feature with a route of its own: nothing in the API names it."""

    name = "counter"

    def __init__(self, kernel: Kernel) -> None:
        self.counter = Counter()

    def services(self) -> Mapping[type, object]:
        return {Counter: self.counter}

    def routes(self) -> Sequence[Any]:
        from fastapi import APIRouter, Depends

        from ator.agent.routes import require, service

        router = APIRouter(prefix="/v1")

        @router.post("/counter")
        async def hit(p: Principal = Depends(require("member")),
                      counter: Counter = Depends(service(Counter))) -> dict[str, Any]:
            counter.hits += 1
            return {"org_id": str(p.org_id), "hits": counter.hits}

        return [router]


async def test_an_extensions_routes_are_mounted_with_the_apis_authentication(
        make_ator) -> None:
    async with operator_client(make_ator, extensions=(*DEFAULT_EXTENSIONS, CounterExtension)
                               ) as (client, key, ator):
        auth = {"Authorization": f"Bearer {key}"}
        viewer = (await client.post("/v1/api-keys", headers=auth, json={
            "name": "v", "role": "viewer", "email": "v@counter.test"})).json()["key"]
        hit = await client.post("/v1/counter", headers=auth)
        assert hit.status_code == 200, hit.text
        assert hit.json()["hits"] == 1 and ator.service(Counter).hits == 1
        refused = await client.post("/v1/counter", headers={"Authorization": f"Bearer {viewer}"})
        assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
        assert (await client.post("/v1/counter")).status_code == 401
        assert ator.service(Counter).hits == 1
    # Without the extension the route does not exist.
    async with operator_client(make_ator) as (client, key, _ator):
        missing = await client.post("/v1/counter", headers={"Authorization": f"Bearer {key}"})
        assert missing.status_code == 404
