"""Structured logs carry the ids of the work they describe."""

from __future__ import annotations

import io
import json
import logging

from ator.context import org_id_var, request_id_var, thread_id_var, turn_id_var
from ator.obs.logging import _JsonFormatter


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
