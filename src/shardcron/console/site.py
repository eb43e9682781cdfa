"""What every endpoint of the console shares: the :class:`Console` with its state (admin,
accounts, trace engine, templates), who is asking (sessions, roles, CSRF-checked forms, login
and logout), rendering a page or one live part of it, and the console's own URLs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from sqlalchemy.engine import Engine
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from shardcron.console import formats
from shardcron.console.actions import question
from shardcron.console.auth import (
    Accounts,
    EndedSessions,
    Role,
    new_token,
    same_origin,
    same_token,
)
from shardcron.console.guard import LoginThrottle, login_keys
from shardcron.operations.admin import Admin

HERE = Path(__file__).parent


class Console:
    """The console's state (admin, accounts, trace engine, templates), its gatekeeping and
    rendering, which every endpoint uses, and the login and logout endpoints."""

    def __init__(
        self,
        admin: Admin,
        accounts: Accounts,
        tracing: Engine | None,
        session_seconds: int,
        throttle: LoginThrottle | None = None,
    ) -> None:
        self.admin = admin
        self.accounts = accounts
        self.throttle = throttle or LoginThrottle()
        self.tracing = tracing
        self.ended = EndedSessions(session_seconds)
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        env.filters["when"] = formats.when
        env.filters["seconds"] = formats.seconds
        env.filters["duration"] = formats.duration
        env.filters["epoch"] = formats.epoch
        env.filters["instance_of"] = formats.instance_of
        env.globals["href"] = href
        env.globals["question"] = question
        env.globals["live"] = _live
        env.globals["zone"] = formats.local_zone_name
        self.templates = Jinja2Templates(env=env)

    # -- gatekeeping ----------------------------------------------------------------------

    def role(self, request: Request) -> Role | None:
        session = request.session
        if not isinstance(session.get("sid"), str) or session["sid"] in self.ended:
            return None
        return self.accounts.role(session.get("user"))

    def login_redirect(self, request: Request) -> Response:
        if "part" in request.query_params:
            return PlainTextResponse("log in again", status_code=401)
        # After the login, only a page can be shown again, not a form's POST.
        back = _here(request) if request.method == "GET" else None
        return RedirectResponse(href("login", next=back), status_code=303)

    async def checked_form(self, request: Request, *, admin: bool) -> Mapping[str, str] | Response:
        """The POSTed form if the session may send it, else the response that refuses it."""
        form = await request.form()
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        role = self.role(request)
        if role is None:
            return self.login_redirect(request)
        if not same_token(request.session.get("csrf"), fields.get("csrf")):
            return self.refuse(request, "The form has expired or did not come from this console.")
        if not same_origin(request):
            return self.refuse(request, "The request came from another site.")
        if admin and role is not Role.ADMIN:
            return self.refuse(request, "Your account may look but not act (guest role).")
        return fields

    def refuse(self, request: Request, message: str) -> Response:
        return self.render(request, "error.html", {"message": message}, status=403)

    # -- rendering ------------------------------------------------------------------------

    def render(
        self,
        request: Request,
        template: str,
        context: Mapping[str, Any],
        *,
        parts: Mapping[str, str] | None = None,
        status: int = 200,
    ) -> Response:
        part = request.query_params.get("part")
        if part is not None:
            if parts is None or part not in parts:
                return PlainTextResponse(f"no part {part!r} here", status_code=404)
            template = parts[part]
        role = self.role(request)
        base = {
            "request": request,
            "user": request.session.get("user") if role else None,
            "role": role,
            "is_admin": role is Role.ADMIN,
            "csrf": _csrf(request),
            "flash": request.session.pop("flash", None) if part is None else None,
            "connected": self.admin.registry.connected,
            "namespace": self.admin.registry.namespace,
            "tracing": self.tracing is not None,
            "here": _here(request),
        }
        # Every response, a live part too, says whether the registry is reachable, so an open
        # page turns its banner on (and back off) without a reload.
        state = {"x-registry": "connected" if base["connected"] else "down"}
        return self.templates.TemplateResponse(
            request, template, {**base, **context}, status_code=status, headers=state
        )

    # -- login ----------------------------------------------------------------------------

    async def login(self, request: Request) -> Response:
        target = _local_path(request.query_params.get("next"), href("jobs"))
        if request.method == "GET":
            if self.role(request) is not None:
                return RedirectResponse(target, status_code=303)
            return self.render(request, "login.html", {"next": target, "error": None})
        form = await request.form()
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        target = _local_path(fields.get("next"), href("jobs"))
        if not same_token(request.session.get("csrf"), fields.get("csrf")) or not same_origin(
            request
        ):
            return self.refuse(request, "The login form has expired; reload the page.")
        user = fields.get("user", "")
        keys = login_keys(request.client.host if request.client else None, user)
        wait = self.throttle.retry_after(keys)
        if wait > 0:  # refused unchecked: a guess made during the wait teaches nothing
            error = f"Too many wrong passwords; try again in {math.ceil(wait)} s."
            answer = self.render(
                request, "login.html", {"next": target, "error": error}, status=429
            )
            answer.headers["retry-after"] = str(math.ceil(wait))
            return answer
        found = self.accounts.authenticate(user, fields.get("password", ""))
        if found is None:
            self.throttle.failed(keys)
            context = {"next": target, "error": "Wrong user name or password."}
            return self.render(request, "login.html", context, status=401)
        self.throttle.succeeded(keys)
        request.session.clear()  # a fresh session and token: nothing carries over from before
        request.session.update({"user": found.user, "sid": new_token(), "csrf": new_token()})
        return RedirectResponse(target, status_code=303)

    async def logout(self, request: Request) -> Response:
        checked = await self.checked_form(request, admin=False)
        if isinstance(checked, Response):
            return checked
        self.ended.end(request.session.get("sid"))
        request.session.clear()
        return RedirectResponse(href("login"), status_code=303)


# -- the console's URLs; the session's token and message ---------------------------------------


def href(*segments: object, **query: object) -> str:
    """A path of the console from raw segments (each quoted whole) and query values."""
    path = "/" + "/".join(quote(str(s), safe="") for s in segments)
    shown = {k: str(v) for k, v in query.items() if v is not None and v != ""}
    return f"{path}?{urlencode(shown)}" if shown else path


def _here(request: Request) -> str:
    query = [(k, v) for k, v in request.query_params.multi_items() if k != "part"]
    return request.url.path + (f"?{urlencode(query)}" if query else "")


def _live(here: str, part: str) -> str:
    """The URL a live section polls: its page's URL asking for just that part."""
    return f"{here}{'&' if '?' in here else '?'}{urlencode({'part': part})}"


def _local_path(candidate: str | None, default: str) -> str:
    """``candidate`` if it is a path on this console (never another site), else ``default``."""
    if not candidate or not candidate.startswith("/") or candidate.startswith(("//", "/\\")):
        return default
    return candidate


def _csrf(request: Request) -> str:
    token = request.session.get("csrf")
    if not isinstance(token, str):
        token = request.session["csrf"] = new_token()
    return token


def _flash(request: Request, kind: str, text: str) -> None:
    request.session["flash"] = {"kind": kind, "text": " ".join(text.split())}
