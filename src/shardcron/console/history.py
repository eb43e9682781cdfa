"""The history pages' filter form and paging: the form's text checked and turned into the
arguments of :func:`shardcron.tracing.history.executions` and
:func:`~shardcron.tracing.history.statuses`, and the links to the previous and next page.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request

from shardcron.errors import ConfigError
from shardcron.tracing.history import Page

PAGE_SIZES = (20, 50, 100, 200)

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


def _paging(request: Request, page: Page[Any]) -> dict[str, str | None]:
    """Links to the previous and next page, keeping every filter."""
    query = {k: v for k, v in request.query_params.items() if k not in ("offset", "part")}

    def at(offset: int) -> str:
        return f"{request.url.path}?{urlencode({**query, 'offset': offset})}"

    offset = page.offset
    return {
        "previous": at(max(offset - page.limit, 0)) if offset > 0 else None,
        "next": at(offset + page.limit) if offset + page.limit < page.total else None,
    }
