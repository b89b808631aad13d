"""`web_fetch(url)`: a page from the web as text, through the egress guard (layer: tools;
imports net.egress, httpx, tools.base, tools.failure, errors).

Size and time are capped, HTML is reduced to its text (scripts and styles dropped), and the
result is untrusted: it reaches the model labelled as data. Whether a turn gets this tool at
all is the engine's business (off unless the setup's tool policy names it).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import httpx

from ator.errors import AtorError, ToolError
from ator.net.egress import Egress
from ator.tools.base import Tool, ToolContext, ToolResult
from ator.tools.failure import failure

__all__ = ["html_text", "web_fetch_tool"]

_SKIP = {"script", "style", "noscript", "template", "svg", "head"}
_BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section",
          "article", "pre", "blockquote", "table", "ul", "ol", "title"}


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self._skip += 1
        elif tag in _BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP and self._skip:
            self._skip -= 1
        elif tag in _BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def html_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    parser.close()
    text = re.sub(r"[ \t\r\f\v]+", " ", "".join(parser.parts))
    return re.sub(r"\n\s*\n+", "\n\n", text).strip()


def web_fetch_tool(egress: Egress, *, max_bytes: int = 2_000_000, timeout: float = 20.0
                   ) -> Tool:
    async def handler(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        url = str(args["url"])
        try:
            egress.guard.check_url(url)
            async with egress.httpx_client(timeout=timeout) as client, \
                    client.stream("GET", url, headers={"Accept": "text/html, text/*"}) as resp:
                body = b""
                async for chunk in resp.aiter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        body = body[:max_bytes]
                        break
        except AtorError as exc:
            return failure(exc, tool="web_fetch")
        except httpx.TimeoutException:
            raise ToolError(f"{url} did not answer within {timeout:g}s") from None
        except httpx.HTTPError as exc:
            raise ToolError(f"fetching {url} failed: {exc or 'the connection broke'}",
                            code="fetch_failed") from None
        text = body.decode(resp.encoding or "utf-8", errors="replace")
        if "html" in resp.headers.get("content-type", "") or text.lstrip()[:1] == "<":
            text = html_text(text)
        status = f"HTTP {resp.status_code}"
        return ToolResult(f"[{status} {url}]\n{text}", is_error=resp.status_code >= 400,
                          untrusted=True, meta={"status": resp.status_code})

    return Tool(
        name="web_fetch",
        description="Fetch a web page (http/https) and return its text.",
        input_schema={"type": "object", "properties": {
            "url": {"type": "string", "minLength": 8, "maxLength": 2000}},
            "required": ["url"], "additionalProperties": False},
        handler=handler, timeout=timeout + 5, read_only=True, untrusted=True,
    )
