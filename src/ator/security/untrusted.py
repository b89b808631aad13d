"""Defusing outside text before ator frames it as data (layer: security; imports re only).

Tool results, MCP output and subagent results reach the model inside delimiters that say
"this is data" (invariant 8). Text from outside could try to end that frame early or to pass
for a turn of the conversation; `neutralize` takes both away, in one place for every frame.
"""

from __future__ import annotations

import re

__all__ = ["neutralize"]

_ROLE_MARKER = re.compile(
    r"^([ \t>*#-]*)(system|assistant|user|human|developer|tool)(\s*:)",
    re.IGNORECASE | re.MULTILINE,
)


def neutralize(text: str, tags: tuple[str, ...] = ("untrusted-data",)) -> str:
    """Defuse what in outside text could pass for our framing: an opening or closing tag
    named in `tags` (its `<` becomes `&lt;`, so a fake `</untrusted-data>` cannot end the
    wrapper early) and a line that starts like a role marker (`SYSTEM:`, `Human:`, …),
    which gets a `[quoted]` prefix."""
    for tag in tags:
        text = re.sub(rf"<(\s*/?\s*{re.escape(tag)})", r"&lt;\1", text, flags=re.IGNORECASE)
    return _ROLE_MARKER.sub(r"\1[quoted] \2\3", text)
