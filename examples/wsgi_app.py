"""The smallest WSGI application, served by ``gunicorn -c examples/gunicorn_conf.py``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello from a gunicorn worker; shardcron jobs run alongside\n"]
