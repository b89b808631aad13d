"""`http`: one HTTP request through the egress guard (layer: workflows; imports httpx,
ator.net, ator.security, ator.store, ator.workflows.*).

    {"id": "fetch", "type": "http", "method": "POST", "url": "'https://api.example/' & x",
     "headers": {"Authorization": {"secret": "EXAMPLE_TOKEN"}}, "body": "{'q': input.q}"}

Every request and every redirect hop passes the guard (net/: resolve, refuse
private/loopback/link-local targets unless the operator allowlisted them, pin the IP),
and secret headers are dropped across origins. Secrets are named by reference (the org's
secrets store) and never written into the recipe, the step or its output. The response is
capped in size (`max_bytes`) and time (`timeout_s`, also capped by the operator's policy).
The output is `{status, content_type, body}` (parsed when JSON). A 4xx or a refusal fails
the step at once; a 5xx, a timeout or a broken connection is retried with backoff.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from ator.errors import AtorError
from ator.net.egress import Egress
from ator.net.guard import egress_refusal
from ator.security.crypto import MasterKey
from ator.store import secrets as secret_store
from ator.workflows.step_types import (
    EXPR,
    Attempt,
    Executable,
    StepError,
    child_schema,
    step_schema,
)

__all__ = ["Http"]

_HEADER = {"oneOf": [{"type": "string", "maxLength": 8_000},
                     {"type": "object", "required": ["secret"], "additionalProperties": False,
                      "properties": {"secret": {"type": "string", "minLength": 1,
                                                "maxLength": 200}}}]}
_PROPS: dict[str, Any] = {
    "method": {"enum": ["GET", "POST", "PUT", "PATCH", "DELETE"]}, "url": EXPR, "body": EXPR,
    "headers": {"type": "object", "maxProperties": 50, "additionalProperties": _HEADER},
    "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 120},
    "max_bytes": {"type": "integer", "minimum": 1, "maximum": 4_000_000}}


class Http(Executable):
    name = "http"
    schema = step_schema("http", ["url"], **_PROPS)
    child_schema = child_schema("http", ["url"], **_PROPS)
    exprs = ("url", "body")

    def __init__(self, egress: Egress | None = None, master_key: MasterKey | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.egress = egress
        self.master_key = master_key
        self.transport = transport  # tests: an inner transport (the guard still judges)

    async def run(self, attempt: Attempt) -> Any:
        if self.egress is None or self.master_key is None:
            raise StepError("this engine makes no http steps")
        spec = attempt.step.spec
        data = await attempt.data()
        url = await attempt.evaluate(spec["url"], data)
        if not isinstance(url, str):
            raise StepError("`url` must give a string")
        headers: dict[str, str] = {}
        secret: list[str] = []
        for name, value in (spec.get("headers") or {}).items():
            if isinstance(value, dict):
                try:
                    headers[name] = await secret_store.reveal(
                        attempt.db, self.master_key, attempt.scope, value["secret"])
                except AtorError as exc:
                    raise StepError(exc.message, code="secret_missing") from None
                secret.append(name)
            else:
                headers[name] = value
        content = None
        if "body" in spec:
            content = json.dumps(await attempt.evaluate(spec["body"], data)).encode()
            headers.setdefault("Content-Type", "application/json")
        cap = int(spec.get("max_bytes", 1_000_000))
        timeout = float(spec.get("timeout_s", 30))
        try:
            self.egress.guard.check_url(url)
            async with self.egress.httpx_client(timeout=timeout, secret_headers=secret,
                                                transport=self.transport) as client, \
                    client.stream(spec.get("method", "GET"), url, headers=headers,
                                  content=content) as resp:
                body = b""
                async for chunk in resp.aiter_bytes():
                    body += chunk
                    if len(body) > cap:
                        raise StepError(f"the response is above max_bytes ({cap})",
                                        code="response_too_large")
        except StepError:
            raise
        except AtorError as exc:  # the guard refused the target (or a hop of it)
            raise StepError(f"refused: {exc.message}", code=exc.code) from None
        except httpx.HTTPError as exc:
            refused = egress_refusal(exc)
            if refused is not None:
                raise StepError(f"refused: {refused.message}", code=refused.code) from None
            raise  # a timeout or a broken connection: retried
        if resp.status_code >= 500:
            raise RuntimeError(f"{url} answered HTTP {resp.status_code}")  # retried
        if resp.status_code >= 400:
            raise StepError(f"{url} answered HTTP {resp.status_code}", code="http_status")
        kind = resp.headers.get("content-type", "")
        text = body.decode(resp.encoding or "utf-8", errors="replace")
        parsed: Any = text
        if "json" in kind:
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = text
        return {"status": resp.status_code, "content_type": kind, "body": parsed}
