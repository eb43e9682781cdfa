"""The web console: an ASGI app (Starlette) over the admin API and the trace history.

Pages are rendered on the server with Jinja2. A part of a page that follows the registry
(``<section data-live=...>``) is fetched again every second by a few lines of script
(the page's own URL with ``?part=NAME`` returns just that part) and swapped in when it
changed, so an operator watches items move during a failover without reloading. One
template renders a part both inside its page and alone, so what a refresh shows never
drifts from what a reload shows, and buttons a guest may not press are left out of both.

Routes stay thin. Reads go to :class:`~shardcron.operations.admin.Admin` built with ``cached=True``
(a watched copy of the namespace, so a refresh costs no registry round trip) and to the
history queries of :mod:`shardcron.tracing.history`; every action is one ``Admin`` call whose
result is reported on the next page as a one-line message.

Security (see :mod:`shardcron.console.auth`): every page needs a login; every change is a
POST that needs the admin role, the session's CSRF token and a same-origin request
(:mod:`shardcron.console.guard` adds login backoff, trusted hosts and secure cookies); the
destructive ones (shutdown, remove) also need an explicit confirmation, asked by the
browser or, without script, by a confirmation page. Responses forbid framing, inline
script and caching.

This module owns the assembly: :func:`create_app` with its routes and middleware, and the
security headers. The endpoints are in :mod:`.site` (login, gatekeeping, rendering),
:mod:`.pages` (what an operator reads) and :mod:`.changes` (what changes the registry).
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy.engine import Engine
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shardcron.console.auth import Accounts
from shardcron.console.changes import Changes
from shardcron.console.guard import (
    LOOPBACK_HOSTS,
    LoginThrottle,
    SecureCookies,
    TrustedHosts,
)
from shardcron.console.pages import Pages
from shardcron.console.site import HERE, Console
from shardcron.operations.admin import Admin

Endpoint = Callable[[Request], Awaitable[Response] | Response]

SESSION_COOKIE = "shardcron_console"
SESSION_HOURS = 12
ACTIVITY_HOURS = 24
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
}


class SecurityHeaders:
    """Adds the security headers to every response, and ``no-store`` to all but static files."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
                if not static:
                    headers["cache-control"] = "no-store"
            await send(message)

        await self.app(scope, receive, send_with_headers)


def create_app(
    admin: Admin,
    accounts: Accounts,
    *,
    tracing: Engine | None = None,
    secret: str | None = None,
    session_hours: float = SESSION_HOURS,
    allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
    secure_cookies: bool = False,
    throttle: LoginThrottle | None = None,
) -> Starlette:
    """The console over ``admin`` (build it with ``cached=True``) and an optional trace engine.

    ``secret`` signs the session cookies; without one a random secret is made, so sessions
    end when the process does. The caller keeps ``admin`` and ``tracing`` and closes them.
    ``allowed_hosts`` are the names the console answers to (see :mod:`.guard`);
    ``secure_cookies`` marks cookies ``Secure`` even on requests that came over HTTP.
    """
    seconds = round(session_hours * 3600)
    console = Console(admin, accounts, tracing, seconds, throttle)
    pages = Pages(console)
    changes = Changes(console, pages)
    gets: list[tuple[str, Endpoint, str]] = [
        ("/", pages.home, "home"),
        ("/jobs", pages.jobs, "jobs"),
        ("/jobs/{job}", pages.job, "job"),
        ("/servers", pages.servers, "servers"),
        ("/servers/{ip}", pages.server, "server"),
        ("/workers/{instance}", pages.worker, "worker"),
        ("/history/executions", pages.executions, "executions"),
        ("/history/statuses", pages.statuses, "statuses"),
    ]
    posts: list[tuple[str, Endpoint]] = [
        ("/logout", console.logout),
        ("/jobs/{job}/config", changes.edit_config),
        ("/jobs/{job}/servers/{ip}/{action}", changes.job_server_action),
        ("/jobs/{job}/items/{item:int}/{action}", changes.item_action),
        ("/jobs/{job}/{action}", changes.job_action),
        ("/servers/{ip}/{action}", changes.server_action),
    ]
    routes: list[BaseRoute] = [
        Route("/login", console.login, methods=["GET", "POST"], name="login"),
        *(Route(path, fn, methods=["GET"], name=name) for path, fn, name in gets),
        *(Route(path, fn, methods=["POST"]) for path, fn in posts),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [
        Middleware(TrustedHosts, allowed=allowed_hosts),
        Middleware(SecureCookies, always=secure_cookies),
        Middleware(SecurityHeaders),
        Middleware(
            SessionMiddleware,
            secret_key=secret or secrets.token_urlsafe(32),
            session_cookie=SESSION_COOKIE,
            max_age=seconds,
            same_site="lax",
        ),
    ]
    return Starlette(routes=routes, middleware=middleware)
