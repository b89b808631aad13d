"""The two systems under test behind one small interface (bench harness; imports ator's public
API and scripted provider, langgraph, langchain-core, psycopg).

Both run the same turn: the user asks "What is 6*7?", an instant model calls the `calculator`
tool once (the same ator handler on both sides), then answers "42". A turn that ends any other
way raises `TurnFailed`. Each turn gets a thread of its own, created by `new_threads` before any
timing starts.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.prebuilt import create_react_agent
from langgraph.types import Durability
from psycopg import AsyncConnection, AsyncCursor
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from ator import Ator, Scope, Settings
from ator.providers.scripted import tool_then_answer
from ator.tools.base import ToolContext
from ator.tools.builtin import calculator as ator_calculator

__all__ = ["ANSWER", "AtorSystem", "ClientCounts", "LangGraphSystem", "System", "TurnFailed"]

QUESTION = "What is 6*7?"
EXPRESSION = "6*7"
ANSWER = "42"


class TurnFailed(Exception):
    """A turn ended, but not with the scripted tool result and final answer."""


@dataclass(frozen=True, slots=True)
class ClientCounts:
    statements: int
    commits: int | None  # None: the client cannot tell; use the server's count


class System(Protocol):
    name: ClassVar[str]
    database: ClassVar[str]

    async def new_threads(self, n: int) -> list[uuid.UUID]: ...
    async def turn(self, thread: uuid.UUID) -> None: ...
    def client_counts(self) -> ClientCounts: ...
    async def close(self) -> None: ...


class AtorSystem:
    """ator's engine, fully durable, with the scripted provider."""

    name: ClassVar[str] = "ator"
    database: ClassVar[str] = "bench_ator"

    def __init__(self, ator: Ator, scope: Scope, setup_id: uuid.UUID) -> None:
        self.ator = ator
        self.scope = scope
        self.setup_id = setup_id

    @classmethod
    async def open(cls, url: str, data_dir: Path, pool_size: int) -> AtorSystem:
        settings = Settings(database_url=url, data_dir=data_dir, db_pool_size=pool_size)
        provider = tool_then_answer("calculator", {"expression": EXPRESSION}, ANSWER)
        ator = await Ator.open(settings, providers={"bench": provider})
        org = await ator.create_org("bench")
        scope = Scope(org.id)
        setup = await ator.create_setup(scope, name="bench", provider="bench", model="scripted")
        return cls(ator, scope, setup.id)

    async def new_threads(self, n: int) -> list[uuid.UUID]:
        return [(await self.ator.create_thread(self.scope, self.setup_id)).id for _ in range(n)]

    async def turn(self, thread: uuid.UUID) -> None:
        result = await self.ator.ask(self.scope, thread, QUESTION)
        tool_results = [r for frame in result.events if frame["type"] == "tool_results"
                        for r in frame["data"]["data"]["results"]]
        if (result.stop_reason != "end_turn" or result.text != ANSWER
                or [(r["content"], r["is_error"]) for r in tool_results] != [(ANSWER, False)]):
            raise TurnFailed(f"ator turn ended {result.stop_reason!r} with {result.text!r}, "
                             f"tool results {tool_results!r}")

    def client_counts(self) -> ClientCounts:
        statements, commits = self.ator.db.stats.snapshot()
        return ClientCounts(statements, commits)

    async def close(self) -> None:
        await self.ator.close()


# LangGraph ------------------------------------------------------------------------------


class _ScriptedChat(BaseChatModel):
    """An instant chat model: a calculator call for a new question, the answer once the tool
    has replied. Stateless (it reads the conversation), so concurrent turns cannot interfere."""

    @property
    def _llm_type(self) -> str:
        return "bench-scripted"

    def _reply(self, messages: list[BaseMessage]) -> ChatResult:
        usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
        if isinstance(messages[-1], ToolMessage):
            message = AIMessage(content=ANSWER, usage_metadata=usage)
        else:
            call = {"name": "calculator", "args": {"expression": EXPRESSION}, "id": "call_0",
                    "type": "tool_call"}
            message = AIMessage(content="", tool_calls=[call], usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        return self._reply(messages)

    async def _agenerate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        # Overridden: the base class would run _generate in a thread pool.
        return self._reply(messages)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> _ScriptedChat:
        return self  # the script already knows the one tool it calls


@tool
async def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression (+ - * / // % ** and parentheses)."""
    ctx = ToolContext(uuid.UUID(int=0), uuid.UUID(int=0), uuid.UUID(int=0), "call_0")
    return str(await ator_calculator.handler({"expression": expression}, ctx))


@dataclass
class _StatementCounter:
    statements: int = 0


def _counting_cursor(counter: _StatementCounter) -> type[AsyncCursor[Any]]:
    """A cursor class that counts statements sent to the server: one per `execute`, and one per
    parameter set of `executemany` (each is its own Bind/Execute, like a separate statement).
    The checkpointer issues every statement through a cursor, so this sees all of them."""

    class CountingCursor(AsyncCursor[Any]):
        async def execute(self, *args: Any, **kwargs: Any) -> Any:
            counter.statements += 1
            return await super().execute(*args, **kwargs)

        async def executemany(self, query: Any, params_seq: Iterable[Any],
                              **kwargs: Any) -> None:
            params = list(params_seq)
            counter.statements += len(params)
            await super().executemany(query, params, **kwargs)

    return CountingCursor


class LangGraphSystem:
    """`create_react_agent` with an `AsyncPostgresSaver` on a psycopg pool."""

    name: ClassVar[str] = "LangGraph"
    database: ClassVar[str] = "bench_langgraph"

    def __init__(self, agent: Any, pool: AsyncConnectionPool[AsyncConnection[DictRow]],
                 counter: _StatementCounter, durability: Durability) -> None:
        self.agent = agent
        self.pool = pool
        self.counter = counter
        self.durability = durability

    @classmethod
    async def open(cls, url: str, pool_size: int, durability: Durability) -> LangGraphSystem:
        counter = _StatementCounter()
        # The connection settings AsyncPostgresSaver documents for a pool.
        pool: AsyncConnectionPool[AsyncConnection[DictRow]] = AsyncConnectionPool(
            url, min_size=pool_size, max_size=pool_size, open=False,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row,
                    "cursor_factory": _counting_cursor(counter)},
        )
        await pool.open(wait=True)
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        with warnings.catch_warnings():
            # Deprecated in favour of langchain.agents.create_agent (the `langchain` package,
            # which adds middleware on top); this is still LangGraph's own prebuilt agent.
            warnings.simplefilter("ignore", DeprecationWarning)
            agent = create_react_agent(_ScriptedChat(), [calculator], checkpointer=saver)
        return cls(agent, pool, counter, durability)

    async def new_threads(self, n: int) -> list[uuid.UUID]:
        return [uuid.uuid4() for _ in range(n)]  # a LangGraph thread is just a new thread_id

    async def turn(self, thread: uuid.UUID) -> None:
        state = await self.agent.ainvoke(
            {"messages": [HumanMessage(QUESTION)]},
            {"configurable": {"thread_id": str(thread)}},
            durability=self.durability,
        )
        messages: list[BaseMessage] = state["messages"]
        tools = [(m.content, m.status) for m in messages if isinstance(m, ToolMessage)]
        last = messages[-1]
        if (not isinstance(last, AIMessage) or last.tool_calls or last.content != ANSWER
                or tools != [(ANSWER, "success")]):
            raise TurnFailed(f"LangGraph turn ended with {last!r}, tool results {tools!r}")

    def client_counts(self) -> ClientCounts:
        return ClientCounts(self.counter.statements, None)

    async def close(self) -> None:
        await self.pool.close()
