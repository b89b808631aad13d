"""The web console's files at /ui (layer: api; imports starlette).

The console is built from `web/` (npm) into `ator/web/dist/` by `make install`, and ships in
the wheel; it is not in git. `/` redirects to `/ui/`. Files under `/ui/assets/` carry a
content hash in their names and are cached for a year; everything else (index.html) is
revalidated each time. A path that is not a file is the single-page app's own route:
index.html answers it. A path holding NUL or another unprintable character is a 404 problem.
With no build, /ui says how to make one (503), never a 500.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from ator.api.problems import problem

__all__ = ["DEFAULT_DIST", "mount_console"]

DEFAULT_DIST = Path(__file__).resolve().parent.parent / "web" / "dist"

_IMMUTABLE = "public, max-age=31536000, immutable"
_REVALIDATE = "no-cache"
_HEADERS = {
    "Content-Security-Policy": ("default-src 'self'; img-src 'self' data:; "
                                "style-src 'self' 'unsafe-inline'; connect-src 'self'; "
                                "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
_NOT_BUILT = """<!doctype html><meta charset="utf-8"><title>ator console not built</title>
<body style="font-family:sans-serif;max-width:40em;margin:3em auto;line-height:1.5">
<h1>The web console is not built</h1>
<p>This ator has no console files in <code>{dist}</code>. Build them from a checkout with
<code>make install</code> (or <code>cd web &amp;&amp; npm ci &amp;&amp; npm run build</code>),
then restart <code>ator serve</code>. The API under <code>/v1</code> works without it.</p>
"""


def mount_console(app: FastAPI, dist: Path | None = None) -> None:
    root = (dist or DEFAULT_DIST).resolve()
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    async def home() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)

    @router.get("/ui")
    async def ui_root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)

    @router.get("/ui/{path:path}")
    async def ui(path: str) -> Response:
        index = root / "index.html"
        if not index.is_file():
            return HTMLResponse(_NOT_BUILT.format(dist=root), status_code=503,
                                headers={"Cache-Control": "no-store"})
        if path and not _plain_path(path):
            # NUL, control characters and undecodable bytes name no file (and NUL would
            # make resolve() raise): the answer is a 404 like any other missing file.
            return problem(404, "not_found", "no such console file")
        if path:
            target = (root / path).resolve()
            if target.is_relative_to(root) and _is_file(target):
                cache = _IMMUTABLE if path.startswith("assets/") else _REVALIDATE
                return FileResponse(target, headers={"Cache-Control": cache, **_HEADERS})
            if path.startswith("assets/") or "." in path.rsplit("/", 1)[-1]:
                return problem(404, "not_found", f"no console file {path!r}")
        return FileResponse(index, headers={"Cache-Control": _REVALIDATE, **_HEADERS})

    app.include_router(router)


def _is_file(target: Path) -> bool:
    try:
        return target.is_file()
    except OSError:  # a name too long for the file system, and the like: no such file
        return False


def _plain_path(path: str) -> bool:
    """A path a console file could have: printable, no surrogate escapes, not absurdly long."""
    return len(path) <= 1024 and path.isprintable() and not any(
        0xD800 <= ord(ch) <= 0xDFFF for ch in path)
