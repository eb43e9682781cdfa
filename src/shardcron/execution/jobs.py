"""What an item run executes: the user's code, a script or an HTTP call, per job type.

A runner takes a :class:`ShardingContext` and returns when the item is done; an
exception fails that item only. :func:`make_runner` checks the job's props once, at
start-up, so a bad prop stops the job with a one-line :class:`ConfigError` instead of
failing every item.

* SIMPLE: a function (or coroutine function) taking the context.
* DATAFLOW: an object with ``fetch_data(ctx) -> list`` and ``process_data(ctx, items)``.
  ``streaming.process: true`` repeats fetch/process until a fetch comes back empty or the
  context says to stop (the job is stopping, or resharding is pending).
* SCRIPT: ``script.command.line`` run without a shell, one process per item, with the
  item's context JSON as the last argument; a non-zero exit or a timeout fails the item.
  The child gets the worker's environment minus shardcron's credential variables.
* HTTP: one request per item with the context JSON in the ``shardingContext`` header;
  status >= 400 or a network error fails the item (ElasticJob only logs those). A URL
  with credentials is a ``${NAME}`` reference in the registry; errors show it redacted,
  and at most ``MAX_RESPONSE_BYTES`` of a response are read.

Coroutines, wherever a user callable returns one, run on the scheduler's one event loop
thread, so an awaiting job never holds a worker thread's loop hostage from other jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import inspect
import json
import logging
import os
import shlex
import signal
import subprocess
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urlsplit

from shardcron.config import secrecy
from shardcron.config.job import JobConfig, resolve_callable
from shardcron.config.jobtypes import JobType
from shardcron.config.secrecy import is_reference, redact_url
from shardcron.errors import ConfigError, ShardcronError
from shardcron.model import ShardingContext

log = logging.getLogger(__name__)

ItemRunner = Callable[[ShardingContext], None]

STREAMING_PROP = "streaming.process"
SCRIPT_COMMAND_PROP = "script.command.line"
SCRIPT_TIMEOUT_PROP = "script.timeout.seconds"
HTTP_URI_PROP = "http.uri"
HTTP_METHOD_PROP = "http.method"
HTTP_DATA_PROP = "http.data"
HTTP_CONNECT_TIMEOUT_PROP = "http.connect.timeout.milliseconds"
HTTP_READ_TIMEOUT_PROP = "http.read.timeout.milliseconds"
HTTP_CONTENT_TYPE_PROP = "http.content.type"
HTTP_BODY_METHODS = ("POST", "PUT", "DELETE")  # the only methods ElasticJob sends a body with

# Keeps a failed HTTP item's error message to one readable line.
_RESPONSE_EXCERPT = 200
# More of a response than this is never read: only an excerpt is ever used.
MAX_RESPONSE_BYTES = 64 * 1024


class ItemFailedError(ShardcronError):
    """A SCRIPT or HTTP item failed: non-zero exit, timeout, error status, network error."""


class AsyncLoop:
    """One event loop thread per scheduler, shared by every coroutine job."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def run(self, coro: Coroutine[Any, Any, object]) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self._get()).result()

    def _get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="shardcron-asyncio", daemon=True
                ).start()
                self._loop = loop
            return self._loop

    def stop(self) -> None:
        with self._lock:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._loop = None


def make_runner(config: JobConfig, target: object | None, loop: AsyncLoop) -> ItemRunner:
    """Build the runner of ``config``; ``target`` is the callable or object given in code."""
    if config.type in (JobType.SCRIPT, JobType.HTTP) and target is not None:
        raise ConfigError(
            "callable",
            f"{config.type} jobs run their props, not code; register them without a callable",
            job=config.job_name,
        )
    if config.type is JobType.SCRIPT:
        return _script(ScriptSettings.of(config))
    if config.type is JobType.HTTP:
        # A URL with credentials is a ${NAME} reference in the registry; resolved only here.
        props = secrecy.resolve_props(config.props, config.job_name)
        return _http(HttpSettings.of(config.with_changes(props=props)))
    # The callable is always the local declaration's: the runtime never takes it from the
    # registry, so a registry write cannot change which code this worker imports.
    found = target if target is not None else resolve_callable(config.callable or "")
    if config.type is JobType.DATAFLOW:
        return _dataflow(found, _streaming(config), loop, config.job_name)
    return _simple(found, loop, config.job_name)


def prop_problems(config: JobConfig) -> list[ConfigError]:
    """The first problem :func:`make_runner` would find in the type's props (for checks that
    must not import or instantiate user code)."""
    checks: dict[JobType, Callable[[JobConfig], object]] = {
        JobType.SCRIPT: ScriptSettings.of,
        JobType.HTTP: HttpSettings.of,
        JobType.DATAFLOW: _streaming,
    }
    check = checks.get(config.type)
    try:
        if check is not None:
            check(config)
    except ConfigError as err:
        return [err]
    return []


# -- SIMPLE and coroutine jobs ----------------------------------------------------------


def _simple(fn: object, loop: AsyncLoop, job: str) -> ItemRunner:
    if not callable(fn):
        raise ConfigError(
            "callable", f"{fn!r} is not callable; give a function taking a context", job=job
        )

    def run(ctx: ShardingContext) -> None:
        _settle(fn(ctx), loop)

    return run


def _settle(result: object, loop: AsyncLoop) -> object:
    """Run ``result`` to completion on the shared loop if it is awaitable."""
    if result is None:  # most jobs: no ABC check per item
        return None
    if inspect.iscoroutine(result):
        return loop.run(result)
    if inspect.isawaitable(result):
        return loop.run(_await(result))
    return result


async def _await(awaitable: Any) -> object:
    return await awaitable


# -- DATAFLOW ---------------------------------------------------------------------------


def _streaming(config: JobConfig) -> bool:
    raw = config.prop(STREAMING_PROP, "false").strip().lower()
    if raw not in ("true", "false"):
        raise ConfigError(
            f"props.{STREAMING_PROP}", f"must be true or false; got {raw!r}", job=config.job_name
        )
    return raw == "true"


def _dataflow(found: object, streaming: bool, loop: AsyncLoop, job: str) -> ItemRunner:
    source = found
    if isinstance(found, type):  # a class: one instance serves every item
        try:
            source = found()
        except Exception as exc:
            problem = " ".join(
                f"cannot instantiate {found.__qualname__} without arguments: {exc}".split()
            )
            raise ConfigError("callable", problem, job=job) from exc
    fetch = getattr(source, "fetch_data", None)
    process = getattr(source, "process_data", None)
    if not callable(fetch) or not callable(process):
        raise ConfigError(
            "callable",
            f"{found!r} has no fetch_data(ctx) and process_data(ctx, items); "
            "DATAFLOW jobs name an object or class with both",
            job=job,
        )

    def run(ctx: ShardingContext) -> None:
        while True:
            data = _settle(fetch(ctx), loop)
            if not data:
                return
            _settle(process(ctx, data), loop)
            if not streaming or not ctx.should_continue():
                return

    return run


# -- SCRIPT -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScriptSettings:
    command: tuple[str, ...]
    timeout: float | None  # seconds; None waits for the script however long it takes

    @classmethod
    def of(cls, config: JobConfig) -> ScriptSettings:
        line = config.prop(SCRIPT_COMMAND_PROP, "")
        field = f"props.{SCRIPT_COMMAND_PROP}"
        try:
            command = tuple(shlex.split(line))
        except ValueError as exc:
            raise ConfigError(field, f"cannot split {line!r}: {exc}", job=config.job_name) from None
        if not command:
            raise ConfigError(
                field, "required for SCRIPT jobs: the command line to run", job=config.job_name
            )
        timeout = positive_prop(config, SCRIPT_TIMEOUT_PROP, "a number of seconds, e.g. 30")
        return cls(command, timeout)


def _script(settings: ScriptSettings) -> ItemRunner:
    def run(ctx: ShardingContext) -> None:
        run_script(settings, ctx)

    return run


def context_json(ctx: ShardingContext) -> str:
    """The context as SCRIPT and HTTP jobs receive it: compact, keys in ElasticJob's order."""
    return json.dumps(ctx.to_json_dict(), separators=(",", ":"), ensure_ascii=False)


def run_script(settings: ScriptSettings, ctx: ShardingContext) -> None:
    """One process for one item; its own process group, so a timeout kills its children too."""
    tag = f"job {ctx.job_name} item {ctx.sharding_item}"
    args = [*settings.command, context_json(ctx)]
    try:
        process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=secrecy.child_environment(),
        )
    except OSError as exc:
        raise ItemFailedError(f"{tag}: cannot start {settings.command[0]!r}: {exc}") from exc
    assert process.stdout is not None and process.stderr is not None
    readers = [
        _pump(process.stdout, tag, "stdout", logging.INFO),
        _pump(process.stderr, tag, "stderr", logging.WARNING),
    ]
    try:
        code = process.wait(settings.timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        raise ItemFailedError(
            f"{tag}: script timed out after {settings.timeout:g}s and was killed "
            f"({SCRIPT_TIMEOUT_PROP})"
        ) from None
    finally:
        for reader in readers:
            # A background child may keep the pipe open; the log lines are not worth a hang.
            reader.join(timeout=5)
    if code != 0:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        raise ItemFailedError(f"{tag}: script {how}")


def _pump(stream: IO[bytes], tag: str, name: str, level: int) -> threading.Thread:
    def read() -> None:
        with stream:
            for raw in stream:
                log.log(level, "%s %s: %s", tag, name, raw.decode(errors="replace").rstrip())

    thread = threading.Thread(target=read, name=f"shardcron-script-{name}", daemon=True)
    thread.start()
    return thread


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended on its own just now
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


# -- HTTP -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HttpSettings:
    uri: str
    method: str
    data: str
    connect_timeout: float  # seconds
    read_timeout: float
    content_type: str | None

    @classmethod
    def of(cls, config: JobConfig) -> HttpSettings:
        job = config.job_name
        uri = config.prop(HTTP_URI_PROP, "").strip()
        problem = url_problem(uri)
        if problem:
            raise ConfigError(f"props.{HTTP_URI_PROP}", problem, job=job)
        method = config.prop(HTTP_METHOD_PROP, "").strip().upper()
        if not method:
            raise ConfigError(f"props.{HTTP_METHOD_PROP}", "required for HTTP jobs", job=job)
        connect = positive_prop(config, HTTP_CONNECT_TIMEOUT_PROP, "milliseconds, e.g. 3000")
        read = positive_prop(config, HTTP_READ_TIMEOUT_PROP, "milliseconds, e.g. 5000")
        return cls(
            uri=uri,
            method=method,
            data=config.prop(HTTP_DATA_PROP, ""),
            connect_timeout=(connect or 3000) / 1000,
            read_timeout=(read or 5000) / 1000,
            content_type=config.prop(HTTP_CONTENT_TYPE_PROP) or None,
        )


def url_problem(uri: str) -> str | None:
    """Why ``uri`` cannot be requested, or None when it is a usable http(s) URL (or a
    ``${NAME}`` reference, which only the worker can resolve and check)."""
    if is_reference(uri):
        return None
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{redact_url(uri)!r} is not an http:// or https:// URL, e.g. http://host:8080/run"
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError as exc:
        return f"{redact_url(uri)!r}: {exc}"
    return None


def _http(settings: HttpSettings) -> ItemRunner:
    def run(ctx: ShardingContext) -> None:
        call_http(settings, ctx)

    return run


def call_http(settings: HttpSettings, ctx: ShardingContext) -> None:
    """One request for one item; any failure raises :class:`ItemFailedError`."""
    # ASCII-escaped: header values must be Latin-1.
    headers = {"shardingContext": json.dumps(ctx.to_json_dict(), separators=(",", ":"))}
    if settings.content_type:
        headers["Content-Type"] = settings.content_type
    body = settings.data.encode() if settings.method in HTTP_BODY_METHODS else None
    where = redact_url(settings.uri)  # logs and trace rows never carry the URL's secrets
    what = f"job {ctx.job_name} item {ctx.sharding_item}: {settings.method} {where}"
    try:
        status, reason, payload = http_request(
            settings.uri,
            settings.method,
            body,
            headers,
            settings.connect_timeout,
            settings.read_timeout,
        )
    except (OSError, http.client.HTTPException) as exc:
        raise ItemFailedError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
    text = " ".join(payload.decode(errors="replace").split())[:_RESPONSE_EXCERPT]
    if status >= 400:
        raise ItemFailedError(f"{what} returned {status} {reason}: {text}")
    log.debug("%s returned %d: %s", what, status, text)


def http_request(
    uri: str,
    method: str,
    body: bytes | None,
    headers: dict[str, str],
    connect_timeout: float,
    read_timeout: float,
) -> tuple[int, str, bytes]:
    """``(status, reason, body)`` of one request, with separate connect and read timeouts.

    :raises OSError: or :class:`http.client.HTTPException` when the exchange fails.
    """
    parts = urlsplit(uri)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname or "", parts.port, timeout=connect_timeout)
    try:
        connection.connect()
        assert connection.sock is not None
        connection.sock.settimeout(read_timeout)
        connection.request(method, target, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.reason, response.read(MAX_RESPONSE_BYTES)
    finally:
        connection.close()


# -- props ------------------------------------------------------------------------------


def positive_prop(config: JobConfig, name: str, example: str) -> float | None:
    raw = config.prop(name)
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ConfigError(
            f"props.{name}",
            f"must be a positive number ({example}); got {raw!r}",
            job=config.job_name,
        )
    return value
