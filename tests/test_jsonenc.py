"""ator.jsonenc keeps the meaning of `json.dumps(..., default=str)` for what turns write."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
import uuid

from ator import jsonenc


@dataclasses.dataclass
class Point:
    x: int


def stdlib(value: object, **kw: object) -> str:
    return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"), **kw)


def test_the_same_json_values_as_the_standard_library_with_str_as_default() -> None:
    value = {
        "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "at": datetime.datetime(2026, 11, 30, 14, 0, tzinfo=datetime.UTC),
        "day": datetime.date(2026, 11, 30),
        "usd": decimal.Decimal("1.50"),
        "point": Point(3),
        "text": "héllo — 日本 \u2028 \"q\" \\ \n",
        "nested": [1, 2.5, None, True, {"k": "v"}],
        "huge": 2**70,
    }
    assert json.loads(jsonenc.dumps(value)) == json.loads(stdlib(value))
    assert jsonenc.dumps({"a": 1, "b": [1, 2]}) == '{"a":1,"b":[1,2]}'  # compact


def test_an_integer_beyond_64_bits_falls_back_instead_of_failing() -> None:
    assert json.loads(jsonenc.dumps({"n": -(2**80)})) == {"n": -(2**80)}
    assert jsonenc.canonical({"b": 2**65, "a": 1}) == b'{"a":1,"b":36893488147419103232}'


def test_non_string_keys_become_strings_and_canonical_sorts_keys() -> None:
    assert json.loads(jsonenc.dumps({1: "a", None: "b"})) == {"1": "a", "null": "b"}
    assert jsonenc.canonical({"b": 1, "a": {"d": 1, "c": 2}}) == b'{"a":{"c":2,"d":1},"b":1}'
    assert jsonenc.size({"t": "é"}) == len('{"t":"é"}'.encode())


def _frame() -> dict[str, object]:
    return {"v": 1, "seq": 7, "type": "assistant",
            "data": {"id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
                     "at": datetime.datetime(2026, 11, 30, 14, 0, tzinfo=datetime.UTC),
                     "usd": decimal.Decimal("0.0105"), "text": "héllo 日本"}}


def test_sse_socket_packets_and_responses_use_the_one_encoder_with_the_same_meaning() -> None:
    """SSE, socket packets and FastAPI's responses were each encoded their own way (stdlib,
    ASCII-escaped); now all are ator.jsonenc's bytes, with the values they always had."""
    from fastapi.responses import JSONResponse

    from ator.api.app import create_app
    from ator.api.responses import JsonResponse
    from ator.api.sse import sse
    from ator.realtime.feed import Feeds

    frame = _frame()
    lines = sse(frame).decode().splitlines()
    assert lines[:2] == ["id: 7", "event: assistant"]
    assert lines[2] == "data: " + jsonenc.dumps(frame)
    assert json.loads(lines[2][6:]) == json.loads(stdlib(frame))

    packet = Feeds._packet(frame)
    assert packet.data == "2" + jsonenc.dumps(["frame", frame])

    plain = json.loads(stdlib(frame))  # what FastAPI hands a response class: plain JSON types
    assert JsonResponse(plain).body == jsonenc.encode(plain)
    assert json.loads(JsonResponse(plain).body) == json.loads(JSONResponse(plain).body)
    assert create_app().router.default_response_class is JsonResponse


def test_loads_reads_what_the_standard_library_reads_where_orjson_would_not() -> None:
    """`loads` is orjson's, except for the two texts it reads differently: an integer past
    64 bits (orjson makes it a float and loses digits) and a lone surrogate (it refuses)."""
    for text in ('{"n": 123456789012345678901234567890}', '[-100000000000000000000001]',
                 '"\\ud800 alone"', '{"a": [1, 2.5, null, true, "日本"]}',
                 '[18446744073709551615, 9223372036854775807]'):
        assert jsonenc.loads(text) == json.loads(text)
        assert jsonenc.loads(text.encode()) == json.loads(text)
    assert jsonenc.loads('"12345678901234567890123 in a string"') == (
        "12345678901234567890123 in a string")
    try:
        jsonenc.loads("{not json")
    except ValueError:
        pass
    else:
        raise AssertionError("invalid JSON was read")


async def test_jsonb_read_back_from_the_database_keeps_every_digit(database_url: str) -> None:
    """The pool's jsonb decoder is `jsonenc.loads`: a stored integer past 64 bits comes back
    whole (events and tool results may hold one; orjson alone would round it)."""
    from ator.settings import Settings
    from ator.store.database import open_database

    db = await open_database(Settings(database_url=database_url), run_migrations=False)
    try:
        row = await db.pool.fetchrow(
            "SELECT $1::jsonb AS j, '{\"k\": 1.5}'::json AS plain",
            '{"n": 123456789012345678901234567890, "s": "é"}')
        assert row["j"] == {"n": 123456789012345678901234567890, "s": "é"}
        assert row["plain"] == {"k": 1.5}
    finally:
        await db.close()
