"""LangGraph under the scale workload (bench harness; imports langgraph, langchain-core,
psycopg, httpx).

`create_react_agent` with an `AsyncPostgresSaver` on a psycopg pool (the settings the saver
documents for a pool) and a chat model that streams its reply from the same paced
OpenAI-compatible fake ator's turns use, over HTTP, parsing the SSE chunks as a client SDK would.
`turn` returns the seconds spent in the model's stream, so the caller can subtract it.
"""

from __future__ import annotations

import json
import time
import uuid
import warnings
from typing import Any

import httpx
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.prebuilt import create_react_agent
from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic import PrivateAttr

__all__ = ["LangGraphScale"]


class _PacedChat(BaseChatModel):
    """Streams a completion from the paced fake; records the stream's wall time."""

    base_url: str
    _client: httpx.AsyncClient = PrivateAttr()
    _timing: dict[str, float] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any) -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=2000)
        self._client = httpx.AsyncClient(limits=limits, timeout=120.0)

    @property
    def _llm_type(self) -> str:
        return "bench-paced"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        raise NotImplementedError("async only")

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None,
                         **kwargs: Any) -> ChatResult:
        began = time.time()
        text: list[str] = []
        body = {"model": "gpt-4o-mini", "stream": True,
                "messages": [{"role": "user", "content": str(m.content)} for m in messages]}
        async with self._client.stream("POST", self.base_url + "/chat/completions",
                                       json=body) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    for choice in json.loads(line[6:])["choices"]:
                        text.append(choice["delta"].get("content") or "")
        key = str(kwargs.get("thread", ""))
        self._timing[key] = time.time() - began
        message = AIMessage(content="".join(text))
        message.response_metadata["stream_seconds"] = time.time() - began
        return ChatResult(generations=[ChatGeneration(message=message)])

    def bind_tools(self, tools: Any, **kwargs: Any) -> _PacedChat:
        return self

    async def aclose(self) -> None:
        await self._client.aclose()


class LangGraphScale:
    def __init__(self, agent: Any, model: _PacedChat,
                 pool: AsyncConnectionPool[AsyncConnection[DictRow]]) -> None:
        self.agent = agent
        self.model = model
        self.pool = pool

    @classmethod
    async def open(cls, url: str, model_url: str, pool_size: int) -> LangGraphScale:
        pool: AsyncConnectionPool[AsyncConnection[DictRow]] = AsyncConnectionPool(
            url, min_size=pool_size, max_size=pool_size, open=False, timeout=300,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        )
        await pool.open(wait=True)
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        model = _PacedChat(base_url=model_url)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            agent = create_react_agent(model, [], checkpointer=saver)
        return cls(agent, model, pool)

    async def turn(self, thread: uuid.UUID) -> float:
        state = await self.agent.ainvoke(
            {"messages": [("user", "Hello")]},
            {"configurable": {"thread_id": str(thread)}}, durability="sync")
        last = state["messages"][-1]
        if not isinstance(last, AIMessage) or not last.content:
            raise RuntimeError(f"LangGraph turn ended with {last!r}")
        return float(last.response_metadata["stream_seconds"])

    async def close(self) -> None:
        await self.model.aclose()
        await self.pool.close()
