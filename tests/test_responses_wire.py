"""The Responses API fake (`ator.testing.ResponsesWireFake`, what the real codex CLI is
tested against) read by the official OpenAI SDK's own Responses stream parser."""

from __future__ import annotations

import json

import openai

from ator.testing import Reply, ResponsesWireFake, StreamError, ToolCall, WireUsage


async def test_the_sdk_reads_text_a_tool_call_and_usage_from_the_fake() -> None:
    reply = Reply(text="Hello there, friend.",
                  tool_calls=[ToolCall("lookup", {"q": "x" * 40}, id="call_1")],
                  usage=WireUsage(input_tokens=30, output_tokens=7, cache_read_tokens=12))
    async with ResponsesWireFake([reply]) as fake:
        client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="sk-test")
        async with client.responses.stream(model="gpt-5-codex", input="hi") as stream:
            deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            final = await stream.get_final_response()
        await client.close()
    assert "".join(deltas) == "Hello there, friend." and len(deltas) > 1
    assert final.output_text == "Hello there, friend."
    call = next(o for o in final.output if o.type == "function_call")
    assert (call.name, call.call_id, json.loads(call.arguments)) == ("lookup", "call_1",
                                                                     {"q": "x" * 40})
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (42, 7)
    assert final.usage.input_tokens_details.cached_tokens == 12
    assert fake.requests[0].body["input"] == "hi"


async def test_a_stream_error_is_a_failed_response_for_the_sdk() -> None:
    async with ResponsesWireFake([StreamError("overloaded", code="server_error")],
                                 strict=False) as fake:
        client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0)
        kinds = []
        async with client.responses.stream(model="m", input="hi") as stream:
            kinds = [e.type async for e in stream]
        await client.close()
    assert kinds[-1] == "response.failed"
