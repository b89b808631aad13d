"""Structured logs carry the ids of the work they describe."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator

import pytest

from ator.context import org_id_var, request_id_var, thread_id_var, turn_id_var
from ator.net import Egress
from ator.obs.logging import _JsonFormatter, configure_logging
from ator.settings import Settings
from ator.testing import OpenAIWireFake


def test_json_lines_carry_context_ids_and_redact_extras() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_JsonFormatter())
    logger = logging.getLogger("ator.test.logging")
    logger.addHandler(handler)
    logger.propagate = False
    tokens = [org_id_var.set("org-1"), thread_id_var.set("th-1"), turn_id_var.set("tu-1"),
              request_id_var.set("rq-1")]
    try:
        logger.warning("hello", extra={"api_key": "sk-live-1", "step": 3})
    finally:
        for var, token in zip((org_id_var, thread_id_var, turn_id_var, request_id_var), tokens,
                              strict=True):
            var.reset(token)
        logger.removeHandler(handler)
    line = json.loads(stream.getvalue())
    assert (line["org_id"], line["thread_id"], line["turn_id"], line["request_id"]) == (
        "org-1", "th-1", "tu-1", "rq-1")
    assert line["msg"] == "hello" and line["step"] == 3
    assert line["api_key"] == "[redacted]"


@pytest.fixture
def configured() -> Iterator[Callable[[], list[str]]]:
    """Logging as `ator serve` configures it (JSON lines, INFO), its handler writing to a
    buffer instead of stderr; yields a reader of the lines written so far."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging(json_lines=True, level="INFO")
    buffer = io.StringIO()
    handler = next(h for h in root.handlers if h.get_name() == "ator")
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(buffer)
    try:
        yield lambda: buffer.getvalue().splitlines()
    finally:
        root.handlers, root.level = handlers, level


async def test_no_library_logs_a_url_credential(configured: Callable[[], list[str]]) -> None:
    """Issue 17 S4: the httpx2 logger (the provider and MCP SDKs' transport) logs every
    request's URL at INFO; the userinfo and credential-named query values never reach the
    log. A real request through the egress client, to a real loopback server."""
    egress = Egress.from_settings(Settings(egress_allow=("127.0.0.1",)))
    async with OpenAIWireFake(strict=False) as fake:
        url = f"http://bob:hunter2@127.0.0.1:{fake.port}/mcp?page=2&api_key=hunter3&sig=s3cr3t"
        async with egress.httpx2_client() as client:
            await client.get(url)
    lines = configured()
    logged = [json.loads(line) for line in lines if "HTTP Request" in line]
    assert [r["logger"] for r in logged] == ["httpx2"], lines
    text = "\n".join(lines)
    assert "hunter2" not in text and "hunter3" not in text and "s3cr3t" not in text, text
    assert (f"http://[redacted]@127.0.0.1:{fake.port}/mcp?page=2&api_key=[redacted]"
            "&sig=[redacted]") in logged[0]["msg"]


def test_access_lines_and_tracebacks_are_scrubbed_too(configured: Callable[[], list[str]]
                                                      ) -> None:
    # An access line in uvicorn's format (its own "uvicorn.access" logger is left as another
    # test's uvicorn configured it; under `ator serve`, log_config=None, it reaches the root).
    logging.getLogger("ator.test.access").info(
        '%s - "%s %s HTTP/%s" %d', "10.0.0.1:5", "GET", "/socket.io/?EIO=4&token=tok-hunter4",
        "1.1", 200)
    try:
        raise ValueError("GET https://u:hunter5@h.example/x failed")
    except ValueError:
        logging.getLogger("mcp.client").exception("request failed")
    text = "\n".join(configured())
    assert "hunter4" not in text and "hunter5" not in text, text
    assert "/socket.io/?EIO=4&token=[redacted]" in text and "https://[redacted]@h.example" in text
