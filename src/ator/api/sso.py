"""Single sign-on routes (layer: api; imports fastapi, engine.runtime, sso (the service),
security.sessions, api.*).

`PUT /v1/org/sso` (admin) sets the org's OIDC client; `GET /v1/org/sso` (viewer) shows it
without its secret. The browser's way in: `GET /v1/sso/{org_id}/login` redirects to the
identity provider; it comes back to `GET /v1/sso/callback`, which sets the console's session
cookie (as `POST /v1/sessions` does, but SameSite=Lax: the browser arrives from the
provider's site, and a Strict cookie would not go with the console's first page) and
redirects to the console. `POST /v1/sessions/refresh` (the SSO session itself) asks the
identity provider again and answers a new session, or 401 `sso_refused` with the session
ended once the person was disabled there.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import RedirectResponse

from ator.api.auth import credential, get_ator, require
from ator.api.schemas import SsoIn
from ator.engine.access import Access
from ator.engine.runtime import Ator
from ator.security.sessions import csrf_token, is_session_token, session_cookie_name
from ator.sso import Login, Sso, SsoRefused
from ator.store.records import Principal

router = APIRouter(prefix="/v1")


def _callback(request: Request) -> str:
    return str(request.url_for("sso_callback"))


def _set_cookie(response: Response, request: Request, login: Login, ttl: float) -> None:
    https = request.url.scheme == "https"
    response.set_cookie(session_cookie_name(https), login.token, max_age=int(ttl), path="/",
                        httponly=True, samesite="lax", secure=https)


@router.put("/org/sso")
async def set_sso(body: SsoIn, p: Principal = Depends(require("admin")),
                  ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    service = ator.service(Sso)
    await service.configure(p.scope, **body.model_dump())
    return await get_sso(p, ator)


@router.get("/org/sso")
async def get_sso(p: Principal = Depends(require("viewer")),
                  ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    c = await ator.service(Sso).find(p.scope)
    if c is None:
        return {"configured": False}
    return {"configured": True, "issuer": c.issuer, "client_id": c.client_id,
            "has_client_secret": c.secret_ct is not None, "email_domain": c.email_domain,
            "email_claim": c.email_claim, "role_claim": c.role_claim, "role_map": c.role_map,
            "default_role": c.default_role,
            "login_url": f"/v1/sso/{c.org_id}/login"}


@router.get("/sso/{org_id}/login")
async def sso_login(org_id: UUID, request: Request,
                    ator: Ator = Depends(get_ator)) -> RedirectResponse:
    url = await ator.service(Sso).begin(org_id, _callback(request))
    return RedirectResponse(url, status_code=302, headers={"cache-control": "no-store"})


@router.get("/sso/callback", name="sso_callback")
async def sso_callback(request: Request, code: str = Query(min_length=1, max_length=4096),
                       state: str = Query(min_length=1, max_length=512),
                       ator: Ator = Depends(get_ator)) -> RedirectResponse:
    login = await ator.service(Sso).finish(code=code, state=state,
                                           redirect_uri=_callback(request))
    response = RedirectResponse("/ui/", status_code=302, headers={"cache-control": "no-store"})
    _set_cookie(response, request, login, ator.settings.sso_session_ttl)
    return response


@router.post("/sessions/refresh")
async def sso_refresh(request: Request, response: Response,
                      p: Principal = Depends(require("viewer")),
                      ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    try:
        login = await ator.service(Sso).refresh(p)
    except SsoRefused:
        token = credential(request)
        if token and is_session_token(token):
            await ator.service(Access).close_session(token)
        raise
    _set_cookie(response, request, login, ator.settings.sso_session_ttl)
    return {"org_id": str(login.principal.org_id), "role": login.principal.role,
            "csrf_token": csrf_token(login.token), "expires_at": login.expires.isoformat()}
