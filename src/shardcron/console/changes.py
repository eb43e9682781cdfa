"""The console's endpoints that change the registry (POST, admin role): a button's action
(which Admin call each button makes is in :mod:`.actions`) and the config form.

Each is one ``Admin`` call whose result is reported on the next page as a one-line message;
the destructive actions ask for a confirmation first.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from shardcron.console import config_form
from shardcron.console.actions import ACTIONS, Target, named
from shardcron.console.pages import Pages
from shardcron.console.site import Console, _flash, _local_path, href
from shardcron.errors import ConfigError, JobNotFoundError, ShardcronError


class Changes:
    """The POST endpoints of the buttons and the config form; an admin's session only."""

    def __init__(self, console: Console, pages: Pages) -> None:
        self.console = console  # checks the form and the role, and renders
        self.pages = pages  # a config form with an error is shown again on its job's page
        self.admin = console.admin

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
        checked = await self.console.checked_form(request, admin=True)
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
            return self.console.render(request, "confirm.html", context)
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
        checked = await self.console.checked_form(request, admin=True)
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
            return self.console.render(request, "error.html", {"message": str(exc)}, status=404)
        except ConfigError as exc:
            return self.pages.job_page(request, job, form=values, form_error=exc)
        except ShardcronError as exc:
            _flash(request, "error", str(exc))
            return RedirectResponse(href("jobs", job), status_code=303)
        if settings:
            _flash(request, "ok", f"Saved the config of job {job!r}: {', '.join(settings)}.")
        else:
            _flash(request, "ok", "Nothing changed in the config.")
        return RedirectResponse(href("jobs", job), status_code=303)
