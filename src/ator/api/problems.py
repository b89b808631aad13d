"""RFC 9457 problem+json for every error (layer: api; imports fastapi, ator.errors).

Every error body is `{"type", "title", "status", "detail", "code"}` with a stable `code`;
validation errors add `errors` (where and why). Unexpected exceptions become a 500 with
code `internal_error` and no internals in the body.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ator.api.responses import JsonResponse
from ator.errors import AtorError, RateLimited, ValidationFailed
from ator.obs.logging import get_logger

__all__ = ["install_problem_handlers", "problem"]

log = get_logger("ator.api")

_HTTP_CODES = {
    400: "bad_request", 401: "unauthenticated", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 406: "not_acceptable", 409: "conflict",
    413: "payload_too_large", 415: "unsupported_media_type", 422: "validation_failed",
    429: "rate_limited", 500: "internal_error", 503: "unavailable",
}


def problem(
    status: int, code: str, detail: str, *, headers: dict[str, str] | None = None,
    **extra: Any,
) -> JsonResponse:
    body = {
        "type": f"https://ator.dev/problems/{code}",
        "title": code.replace("_", " ").capitalize(),
        "status": status,
        "detail": detail,
        "code": code,
        **extra,
    }
    return JsonResponse(body, status_code=status, headers=headers,
                        media_type="application/problem+json")


def install_problem_handlers(app: FastAPI) -> None:
    @app.exception_handler(AtorError)
    async def _ator_error(request: Request, exc: AtorError) -> JsonResponse:
        headers = None
        if isinstance(exc, RateLimited):
            headers = {"Retry-After": str(max(1, int(exc.retry_after + 0.999)))}
        if exc.status >= 500:
            log.error("request failed", extra={"code": exc.code, "detail": exc.message})
        extra: dict[str, Any] = {}
        if isinstance(exc, ValidationFailed) and exc.errors:
            extra["errors"] = exc.errors
        return problem(exc.status, exc.code, exc.message, headers=headers, **extra)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JsonResponse:
        errors = [
            {"loc": [str(p) for p in err.get("loc", ())], "msg": str(err.get("msg", "")),
             "type": str(err.get("type", ""))}
            for err in exc.errors()
        ]
        return problem(422, "validation_failed", "the request is not valid", errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JsonResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return problem(exc.status_code, code, str(exc.detail),
                       headers=dict(exc.headers or {}) or None)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JsonResponse:
        log.exception("unhandled error")
        return problem(500, "internal_error", "an internal error occurred")
