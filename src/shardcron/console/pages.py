"""The console's pages (GET): the jobs, one job, servers, one server, one worker and the
execution history, with the reads they share from the admin API and the trace database.

A page asks :class:`~shardcron.console.site.Console` whether the session may look and has it
render the page or the one live part asked for; it changes nothing (see :mod:`.changes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from shardcron.config.secrecy import redact_text
from shardcron.console import config_form
from shardcron.console.chart import run_chart
from shardcron.console.history import _FILTERS, PAGE_SIZES, _history_options, _paging
from shardcron.console.site import Console, href
from shardcron.coordination.events import FireState
from shardcron.errors import ConfigError, JobNotFoundError, ServerNotFoundError, ShardcronError
from shardcron.model import ExecutionSource
from shardcron.observability.workercard import card_path, parse_card
from shardcron.operations.jobstats import JobOverview
from shardcron.tracing import history as queries
from shardcron.tracing.last import LastRun, last_runs

CHART_RUNS = 60
RECENT_RUNS = 10
ACTIVITY_HOURS = 24


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


class Pages:
    """The GET endpoints, and the reads of the registry and trace database they share."""

    def __init__(self, console: Console) -> None:
        self.console = console  # says who may look, and renders
        self.admin = console.admin
        self.tracing = console.tracing

    # -- pages ----------------------------------------------------------------------------

    def home(self, request: Request) -> Response:
        return RedirectResponse(href("jobs"), status_code=303)

    def jobs(self, request: Request) -> Response:
        if self.console.role(request) is None:
            return self.console.login_redirect(request)
        part = request.query_params.get("part")
        context: dict[str, Any] = {}
        if part in (None, "table"):
            context["rows"] = self.job_rows()
        if part in (None, "activity"):  # the database only when its section is asked for
            context["activity"], context["history_error"] = self.activity()
        parts = {"table": "parts/jobs_table.html", "activity": "parts/activity.html"}
        return self.console.render(request, "jobs.html", context, parts=parts)

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
        if self.console.role(request) is None:
            return self.console.login_redirect(request)
        try:
            view = self.admin.overview(job)
            stored = self.admin.config_yaml(job)
        except JobNotFoundError as exc:
            return self.console.render(request, "error.html", {"message": str(exc)}, status=404)
        except ShardcronError as exc:
            message = f"cannot read job {job!r}: {exc}"
            return self.console.render(request, "error.html", {"message": message}, status=422)
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
        return self.console.render(
            request,
            "job.html",
            context,
            parts=parts,
            status=400 if form_error is not None else 200,
        )

    def servers(self, request: Request) -> Response:
        if self.console.role(request) is None:
            return self.console.login_redirect(request)
        context = {"servers": self.admin.servers(), "instances": self.instance_rows()}
        return self.console.render(
            request, "servers.html", context, parts={"table": "parts/servers_table.html"}
        )

    def server(self, request: Request) -> Response:
        if self.console.role(request) is None:
            return self.console.login_redirect(request)
        ip = request.path_params["ip"]
        try:
            jobs = self.admin.server_jobs(ip)
        except ServerNotFoundError as exc:
            return self.console.render(request, "error.html", {"message": str(exc)}, status=404)
        return self.console.render(
            request,
            "server.html",
            {"ip": ip, "jobs": jobs},
            parts={"table": "parts/server_jobs.html"},
        )

    def worker(self, request: Request) -> Response:
        if self.console.role(request) is None:
            return self.console.login_redirect(request)
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
            return self.console.render(request, "error.html", {"message": message}, status=404)
        context = {"instance": instance, "card": card, "jobs": jobs}
        return self.console.render(
            request, "worker.html", context, parts={"card": "parts/worker.html"}
        )

    def executions(self, request: Request) -> Response:
        return self.history(request, "executions")

    def statuses(self, request: Request) -> Response:
        return self.history(request, "statuses")

    def history(self, request: Request, kind: str) -> Response:
        if self.console.role(request) is None:
            return self.console.login_redirect(request)
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
                page: queries.Page[Any] = (
                    queries.executions(self.tracing, **options)
                    if kind == "executions"
                    else queries.statuses(self.tracing, **options)
                )
                context["page"] = page
                context["pages"] = _paging(request, page)
            except ConfigError as exc:
                context["error"], status = str(exc), 400
            except SQLAlchemyError as exc:
                context["error"], status = f"trace database: {_short(exc)}", 503
        return self.console.render(
            request,
            f"{kind}.html",
            context,
            parts={"table": f"parts/{kind}_table.html"},
            status=status,
        )

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

    def activity(self) -> tuple[list[queries.JobSummary], str | None]:
        if self.tracing is None:
            return [], None
        since = datetime.now() - timedelta(hours=ACTIVITY_HOURS)
        try:
            return queries.job_summaries(self.tracing, since=since), None
        except SQLAlchemyError as exc:
            return [], f"trace database: {_short(exc)}"

    def runs_of(self, job: str) -> dict[str, Any]:
        if self.tracing is None:
            return {"chart": None, "recent": [], "history_error": None}
        try:
            points = queries.recent_runs(self.tracing, job, limit=CHART_RUNS)
            recent = queries.executions(self.tracing, job=job, limit=RECENT_RUNS).rows
        except SQLAlchemyError as exc:
            return {"chart": None, "recent": [], "history_error": f"trace database: {_short(exc)}"}
        return {"chart": run_chart(points), "recent": recent, "history_error": None}


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
