"""The web console: an ASGI app (Starlette) over the admin API and the trace history.

Pages are rendered on the server with Jinja2. A part of a page that follows the registry
(``<section data-live=...>``) is fetched again every second by a few lines of script
(the page's own URL with ``?part=NAME`` returns just that part) and swapped in when it
changed, so an operator watches items move during a failover without reloading. One
template renders a part both inside its page and alone, so what a refresh shows never
drifts from what a reload shows, and buttons a guest may not press are left out of both.

Routes stay thin. Reads go to :class:`~shardcron.admin.Admin` built with ``cached=True``
(a watched copy of the namespace, so a refresh costs no registry round trip) and to the
history queries of :mod:`shardcron.tracing.sql`; every action is one ``Admin`` call whose
result is reported on the next page as a one-line message.

Security (see :mod:`shardcron.console.auth`): every page needs a login; every change is a
POST that needs the admin role, the session's CSRF token and a same-origin request
(:mod:`shardcron.console.guard` adds login backoff, trusted hosts and secure cookies); the
destructive ones (shutdown, remove) also need an explicit confirmation, asked by the
browser or, without script, by a confirmation page. Responses forbid framing, inline
script and caching.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shardcron.admin import Admin, JobNotFoundError, JobOverview, ServerNotFoundError
from shardcron.console import config_form, formats
from shardcron.console.actions import ACTIONS, Target, named, question
from shardcron.console.auth import (
    Accounts,
    EndedSessions,
    Role,
    new_token,
    same_origin,
    same_token,
)
from shardcron.console.chart import run_chart
from shardcron.console.guard import (
    LOOPBACK_HOSTS,
    LoginThrottle,
    SecureCookies,
    TrustedHosts,
    login_keys,
)
from shardcron.errors import ConfigError, ShardcronError
from shardcron.events import FireState
from shardcron.model import ExecutionSource
from shardcron.secrecy import redact_text
from shardcron.tracing import sql
from shardcron.tracing.last import LastRun, last_runs
from shardcron.workercard import card_path, parse_card

Endpoint = Callable[[Request], Awaitable[Response] | Response]

HERE = Path(__file__).parent
SESSION_COOKIE = "shardcron_console"
SESSION_HOURS = 12
PAGE_SIZES = (20, 50, 100, 200)
CHART_RUNS = 60
RECENT_RUNS = 10
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


# -- small view models ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobRow:
    name: str
    view: JobOverview | None
    error: str | None = None  # the job's config cannot be read
    last: LastRun | None = None  # from the trace database, if there is one


@dataclass(frozen=True, slots=True)
class WorkerJob:
    name: str
    leader: bool
    items: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class InstanceRow:
    instance_id: str
    server_ip: str
    jobs: tuple[str, ...]
    leads: tuple[str, ...]


# -- the app ------------------------------------------------------------------------------------


class Console:
    """The console's state (admin, accounts, trace engine, templates) and its endpoints."""

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

    # -- pages ----------------------------------------------------------------------------

    def home(self, request: Request) -> Response:
        return RedirectResponse(href("jobs"), status_code=303)

    def jobs(self, request: Request) -> Response:
        if self.role(request) is None:
            return self.login_redirect(request)
        part = request.query_params.get("part")
        context: dict[str, Any] = {}
        if part in (None, "table"):
            context["rows"] = self.job_rows()
        if part in (None, "activity"):  # the database only when its section is asked for
            context["activity"], context["history_error"] = self.activity()
        parts = {"table": "parts/jobs_table.html", "activity": "parts/activity.html"}
        return self.render(request, "jobs.html", context, parts=parts)

    def job(self, request: Request) -> Response:
        return self.job_page(request, request.path_params["job"])

    def job_page(
        self,
        request: Request,
        job: str,
        *,
        form: Mapping[str, str] | None = None,
        form_error: ConfigError | None = None,
    ) -> Response:
        if self.role(request) is None:
            return self.login_redirect(request)
        try:
            view = self.admin.overview(job)
            stored = self.admin.config_yaml(job)
        except JobNotFoundError as exc:
            return self.render(request, "error.html", {"message": str(exc)}, status=404)
        except ShardcronError as exc:
            message = f"cannot read job {job!r}: {exc}"
            return self.render(request, "error.html", {"message": message}, status=422)
        try:
            parameters = view.config.sharding_parameters()
        except ConfigError:
            parameters = {}  # shown as stored in the config text; the table stays readable
        owned: dict[str, list[int]] = {}
        for item in view.items:
            if item.instance_id:
                owned.setdefault(item.instance_id, []).append(item.item)
        context: dict[str, Any] = {
            "job": job,
            "view": view,
            "parameters": parameters,
            "owned": owned,
            "config_text": redact_text(stored),  # guests read it too: no secret, ever
            "fields": config_form.FIELDS,
            "values": form if form is not None else config_form.current_values(view.config),
            "form_error": form_error,
            "error_field": None if form_error is None else config_form.field_of(form_error),
            "here": href("jobs", job),  # also when re-shown after a POST of the config form
        }
        if request.query_params.get("part") in (None, "runs"):
            context.update(self.runs_of(job))
        parts = {"state": "parts/job_state.html", "runs": "parts/job_runs.html"}
        return self.render(
            request,
            "job.html",
            context,
            parts=parts,
            status=400 if form_error is not None else 200,
        )

    def servers(self, request: Request) -> Response:
        if self.role(request) is None:
            return self.login_redirect(request)
        context = {"servers": self.admin.servers(), "instances": self.instance_rows()}
        return self.render(
            request, "servers.html", context, parts={"table": "parts/servers_table.html"}
        )

    def server(self, request: Request) -> Response:
        if self.role(request) is None:
            return self.login_redirect(request)
        ip = request.path_params["ip"]
        try:
            jobs = self.admin.server_jobs(ip)
        except ServerNotFoundError as exc:
            return self.render(request, "error.html", {"message": str(exc)}, status=404)
        return self.render(
            request,
            "server.html",
            {"ip": ip, "jobs": jobs},
            parts={"table": "parts/server_jobs.html"},
        )

    def worker(self, request: Request) -> Response:
        if self.role(request) is None:
            return self.login_redirect(request)
        instance = request.path_params["instance"]
        jobs = self.worker_jobs(instance)
        value = None
        if self.admin.registry.connected:  # else no round trip: the banner says why
            try:
                value = self.admin.registry.get(card_path(instance))
            except ShardcronError:
                value = None
        card = None if value is None else parse_card(value)
        if not jobs and card is None and self.admin.registry.connected:
            message = (
                f"no live instance {instance!r} in namespace {self.admin.registry.namespace!r}"
            )
            return self.render(request, "error.html", {"message": message}, status=404)
        context = {"instance": instance, "card": card, "jobs": jobs}
        return self.render(request, "worker.html", context, parts={"card": "parts/worker.html"})

    def executions(self, request: Request) -> Response:
        return self.history(request, "executions")

    def statuses(self, request: Request) -> Response:
        return self.history(request, "statuses")

    def history(self, request: Request, kind: str) -> Response:
        if self.role(request) is None:
            return self.login_redirect(request)
        query = request.query_params
        filters = {k: query.get(k, "") for k in _FILTERS[kind]}
        context: dict[str, Any] = {
            "kind": kind,
            "filters": filters,
            "job_names": self.admin.job_names(),
            "sources": [str(s) for s in ExecutionSource],
            "states": [str(s) for s in FireState],
            "page_sizes": PAGE_SIZES,
            "page": None,
            "error": None,
            "pages": {},
        }
        status = 200
        if self.tracing is not None:
            try:
                options = _history_options(filters, query.get("offset", ""))
                page: sql.Page[Any] = (
                    sql.executions(self.tracing, **options)
                    if kind == "executions"
                    else sql.statuses(self.tracing, **options)
                )
                context["page"] = page
                context["pages"] = _paging(request, page)
            except ConfigError as exc:
                context["error"], status = str(exc), 400
            except SQLAlchemyError as exc:
                context["error"], status = f"trace database: {_short(exc)}", 503
        return self.render(
            request,
            f"{kind}.html",
            context,
            parts={"table": f"parts/{kind}_table.html"},
            status=status,
        )

    # -- actions --------------------------------------------------------------------------

    async def job_action(self, request: Request) -> Response:
        job = request.path_params["job"]
        gone = request.path_params["action"] == "remove"
        return await self.act(
            request, Target.JOB, (job,), href("jobs") if gone else href("jobs", job)
        )

    async def job_server_action(self, request: Request) -> Response:
        job, ip = request.path_params["job"], request.path_params["ip"]
        return await self.act(request, Target.JOB_SERVER, (job, ip), href("jobs", job))

    async def item_action(self, request: Request) -> Response:
        job, item = request.path_params["job"], request.path_params["item"]
        return await self.act(request, Target.ITEM, (job, item), href("jobs", job))

    async def server_action(self, request: Request) -> Response:
        ip = request.path_params["ip"]
        gone = request.path_params["action"] == "remove"
        return await self.act(
            request, Target.SERVER, (ip,), href("servers") if gone else href("servers", ip)
        )

    async def act(
        self, request: Request, target: Target, args: tuple[Any, ...], default_back: str
    ) -> Response:
        """Run one button's Admin call for an admin, then go back with a one-line message."""
        checked = await self.checked_form(request, admin=True)
        if isinstance(checked, Response):
            return checked
        name = request.path_params["action"]
        action = ACTIONS[target].get(name)
        if action is None:
            return PlainTextResponse(f"no action {name!r}", status_code=404)
        # After a removal the page the button was on is gone: go to the list instead.
        back = default_back if name == "remove" else _local_path(checked.get("next"), default_back)
        what = named(target, *args)
        if action.confirm is not None and checked.get("confirm") != "yes":
            context = {"question": action.confirm.format(target=what), "next": back}
            return self.render(request, "confirm.html", context)
        try:
            writes = await run_in_threadpool(action.run, self.admin, *args)
        except ShardcronError as exc:
            _flash(request, "error", str(exc))
        else:
            if name == "trigger" and not writes:
                _flash(request, "error", f"{what} has no online instance; nothing was triggered")
            else:
                changed = f"{len(writes)} registry node{'s' * (len(writes) != 1)} changed"
                _flash(request, "ok", f"{action.done.format(target=what)} ({changed}).")
        return RedirectResponse(back, status_code=303)

    async def edit_config(self, request: Request) -> Response:
        checked = await self.checked_form(request, admin=True)
        if isinstance(checked, Response):
            return checked
        job = request.path_params["job"]
        values = config_form.submitted_values(checked)
        try:
            config = await run_in_threadpool(self.admin.config, job)
            settings = config_form.changed_settings(config, values)
            if settings:
                await run_in_threadpool(self.admin.update_config, job, settings)
        except JobNotFoundError as exc:
            return self.render(request, "error.html", {"message": str(exc)}, status=404)
        except ConfigError as exc:
            return self.job_page(request, job, form=values, form_error=exc)
        except ShardcronError as exc:
            _flash(request, "error", str(exc))
            return RedirectResponse(href("jobs", job), status_code=303)
        if settings:
            _flash(request, "ok", f"Saved the config of job {job!r}: {', '.join(settings)}.")
        else:
            _flash(request, "ok", "Nothing changed in the config.")
        return RedirectResponse(href("jobs", job), status_code=303)

    # -- reads the pages share ------------------------------------------------------------

    def job_rows(self) -> list[JobRow]:
        rows = []
        last = self.last_runs()
        for name in self.admin.job_names():
            try:
                rows.append(JobRow(name, self.admin.overview(name), last=last.get(name)))
            except JobNotFoundError:
                continue  # removed while the list was read
            except ShardcronError as exc:
                rows.append(JobRow(name, None, str(exc)))
        return rows

    def instance_rows(self) -> list[InstanceRow]:
        jobs: dict[str, list[str]] = {}
        leads: dict[str, list[str]] = {}
        ips: dict[str, str] = {}
        for name in self.admin.job_names():
            try:
                instances = self.admin.instances(name)
            except JobNotFoundError:
                continue
            for each in instances:
                ips[each.instance_id] = each.server_ip
                jobs.setdefault(each.instance_id, []).append(name)
                if each.leader:
                    leads.setdefault(each.instance_id, []).append(name)
        return [
            InstanceRow(i, ips[i], tuple(jobs[i]), tuple(leads.get(i, ()))) for i in sorted(jobs)
        ]

    def worker_jobs(self, instance: str) -> list[WorkerJob]:
        found = []
        for name in self.admin.job_names():
            try:
                here = [i for i in self.admin.instances(name) if i.instance_id == instance]
                if here:
                    owned = [i.item for i in self.admin.sharding(name) if i.instance_id == instance]
                    found.append(WorkerJob(name, here[0].leader, tuple(owned)))
            except ShardcronError:
                continue  # removed or unreadable meanwhile
        return found

    def last_runs(self) -> dict[str, LastRun]:
        if self.tracing is None:
            return {}
        try:
            return last_runs(self.tracing)
        except SQLAlchemyError:
            return {}  # the activity section reports the database's trouble

    def activity(self) -> tuple[list[sql.JobSummary], str | None]:
        if self.tracing is None:
            return [], None
        since = datetime.now() - timedelta(hours=ACTIVITY_HOURS)
        try:
            return sql.job_summaries(self.tracing, since=since), None
        except SQLAlchemyError as exc:
            return [], f"trace database: {_short(exc)}"

    def runs_of(self, job: str) -> dict[str, Any]:
        if self.tracing is None:
            return {"chart": None, "recent": [], "history_error": None}
        try:
            points = sql.recent_runs(self.tracing, job, limit=CHART_RUNS)
            recent = sql.executions(self.tracing, job=job, limit=RECENT_RUNS).rows
        except SQLAlchemyError as exc:
            return {"chart": None, "recent": [], "history_error": f"trace database: {_short(exc)}"}
        return {"chart": run_chart(points), "recent": recent, "history_error": None}


# -- history filters ---------------------------------------------------------------------------

_FILTERS = {
    "executions": ("job", "item", "ip", "instance", "source", "outcome", "since", "until", "limit"),
    "statuses": ("job", "item", "ip", "instance", "state", "task_id", "since", "until", "limit"),
}


def _history_options(filters: Mapping[str, str], offset: str) -> dict[str, Any]:
    """Keyword arguments for executions()/statuses() from the filter form's text."""
    offset = offset.strip() or "0"
    if not offset.isdigit():
        raise ConfigError("offset", f"{offset!r} is not a row number")
    options: dict[str, Any] = {"offset": int(offset)}
    for key in ("job", "ip", "instance", "source", "state", "task_id"):
        if key in filters and filters[key].strip():
            options[key] = filters[key].strip()
    item = filters.get("item", "").strip()
    if item:
        if not item.isdigit():
            raise ConfigError("item", f"{item!r} is not an item number (0, 1, ...)")
        options["item"] = int(item)
    outcome = filters.get("outcome", "")
    if outcome:
        if outcome not in ("success", "failure"):
            raise ConfigError("outcome", f"{outcome!r} is not success or failure")
        options["success"] = outcome == "success"
    for key in ("since", "until"):
        text = filters.get(key, "").strip()
        if text:
            try:
                options[key] = datetime.fromisoformat(text)
            except ValueError:
                raise ConfigError(
                    key, f"{text!r} is not a date and time like 2026-01-31T08:00"
                ) from None
    limit = filters.get("limit", "").strip() or "50"
    if not limit.isdigit():
        raise ConfigError("limit", f"{limit!r} is not a number of rows")
    options["limit"] = int(limit)
    return options


def _paging(request: Request, page: sql.Page[Any]) -> dict[str, str | None]:
    """Links to the previous and next page, keeping every filter."""
    query = {k: v for k, v in request.query_params.items() if k not in ("offset", "part")}

    def at(offset: int) -> str:
        return f"{request.url.path}?{urlencode({**query, 'offset': offset})}"

    offset = page.offset
    return {
        "previous": at(max(offset - page.limit, 0)) if offset > 0 else None,
        "next": at(offset + page.limit) if offset + page.limit < page.total else None,
    }


# -- helpers -----------------------------------------------------------------------------------


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


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


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
    pages: list[tuple[str, Endpoint, str]] = [
        ("/", console.home, "home"),
        ("/jobs", console.jobs, "jobs"),
        ("/jobs/{job}", console.job, "job"),
        ("/servers", console.servers, "servers"),
        ("/servers/{ip}", console.server, "server"),
        ("/workers/{instance}", console.worker, "worker"),
        ("/history/executions", console.executions, "executions"),
        ("/history/statuses", console.statuses, "statuses"),
    ]
    posts: list[tuple[str, Endpoint]] = [
        ("/logout", console.logout),
        ("/jobs/{job}/config", console.edit_config),
        ("/jobs/{job}/servers/{ip}/{action}", console.job_server_action),
        ("/jobs/{job}/items/{item:int}/{action}", console.item_action),
        ("/jobs/{job}/{action}", console.job_action),
        ("/servers/{ip}/{action}", console.server_action),
    ]
    routes: list[BaseRoute] = [
        Route("/login", console.login, methods=["GET", "POST"], name="login"),
        *(Route(path, fn, methods=["GET"], name=name) for path, fn, name in pages),
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
