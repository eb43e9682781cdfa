"""Error handlers (``jobErrorHandlerType``): what happens when an item or a fire fails.

The runtime calls a handler with the job name, the failed item's context (None for a
fire-level failure such as a listener error or a lost registry connection) and the error.
Whatever the handler, the item counts as failed and the scheduler carries on.

* ``LOG`` (default): log the error with its traceback.
* ``THROW``: re-raise the error into the runtime, as ElasticJob does: the item is failed
  either way; a fire-level error raised this way aborts what the fire was doing (e.g. the
  time-diff check skips the fire). The runtime logs it and the scheduler carries on.
* ``IGNORE``: drop it (DEBUG log only).
* ``WEBHOOK``: log it, then POST a JSON report to ``webhook.url`` (``webhook.format`` shapes
  it for chat robots: ``json``, ``slack``, ``dingtalk``, ``wechat``, ``feishu``).
* ``EMAIL``: log it, then mail a report through SMTP (``email.*`` props, ElasticJob's names).
* ``WECHAT`` / ``DINGTALK``: ElasticJob's robot handlers, as WEBHOOK with their props.
* Any other name: a handler the worker registered (``Scheduler(error_handlers=...)``,
  ``worker.errorHandlers``); a name from the registry never imports code.

Secret props (passwords, signing secrets, URLs with tokens) are ``${NAME}`` references in
the registry, resolved here from the worker's own secrets (:mod:`shardcron.config.secrecy`).
EMAIL verifies the server's certificate (SMTPS and STARTTLS) and refuses to log in over
plain SMTP unless ``email.allowPlaintextLogin`` says so.

Props are checked when the job starts (one-line :class:`ConfigError` naming the prop). A
handler that cannot deliver logs why and returns: its own failure never reaches the job.
Delivery is synchronous on the failed item's worker thread, bounded by the timeouts, so a
burst of failures cannot pile up unbounded background work.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import smtplib
import ssl
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from typing import cast
from urllib.parse import quote

from shardcron.config import plugins, secrecy
from shardcron.config.job import JobConfig
from shardcron.config.jobtypes import ERROR_HANDLERS
from shardcron.config.secrecy import redact_url
from shardcron.errors import ConfigError
from shardcron.execution.jobs import http_request, positive_prop, url_problem
from shardcron.execution.lanes import ErrorHandler
from shardcron.model import ShardingContext, default_instance_id

log = logging.getLogger(__name__)

WEBHOOK_FORMATS = ("json", "slack", "dingtalk", "wechat", "feishu")


def log_error(job: str, ctx: ShardingContext | None, error: BaseException) -> None:
    log.error("job %s%s failed: %s", job, _where(ctx), error, exc_info=error)


def throw_error(job: str, ctx: ShardingContext | None, error: BaseException) -> None:
    raise error


def ignore_error(job: str, ctx: ShardingContext | None, error: BaseException) -> None:
    log.debug("job %s%s failed (ignored): %s", job, _where(ctx), error)


def _where(ctx: ShardingContext | None) -> str:
    return "" if ctx is None else f" item {ctx.sharding_item}"


def make_error_handler(config: JobConfig, instance: str | None = None) -> ErrorHandler | None:
    """The handler ``config`` names, its props checked; None when it names none (the
    scheduler's default applies). ``instance`` goes into WEBHOOK and EMAIL reports."""
    kind = config.job_error_handler_type
    if kind is None:
        return None
    who = instance or default_instance_id()
    simple: dict[str, ErrorHandler] = {
        "LOG": log_error,
        "THROW": throw_error,
        "IGNORE": ignore_error,
    }
    if kind in simple:
        return simple[kind]
    registered = plugins.lookup(plugins.Kind.ERROR_HANDLER, kind)
    if registered is not None:
        return cast(ErrorHandler, registered)
    # Secret props are ${NAME} references in the registry; only here do they get values.
    config = config.with_changes(props=secrecy.resolve_props(config.props, config.job_name))
    notifier: Callable[[Failure], None]
    if kind == "WEBHOOK":
        notifier = Webhook.of(config, "webhook.")
    elif kind == "WECHAT":
        notifier = Webhook.of(config, "wechat.", fmt="wechat")
    elif kind == "DINGTALK":
        notifier = Webhook.of(config, "dingtalk.", fmt="dingtalk")
    elif kind == "EMAIL":
        notifier = Email.of(config)
    else:
        problem = plugins.name_problem(
            plugins.Kind.ERROR_HANDLER, kind, ERROR_HANDLERS, registered_only=True
        )
        raise ConfigError("jobErrorHandlerType", problem or kind, job=config.job_name)
    return _Notifying(kind, notifier, who)


@dataclass(frozen=True, slots=True)
class Failure:
    """One failure, as WEBHOOK and EMAIL report it."""

    job: str
    instance: str
    item: int | None
    task_id: str | None
    sharding_parameter: str | None
    job_parameter: str | None
    error_type: str
    error: str
    traceback: str
    time: str  # ISO 8601, UTC

    @classmethod
    def of(
        cls, job: str, ctx: ShardingContext | None, error: BaseException, instance: str
    ) -> Failure:
        return cls(
            job=job,
            instance=instance,
            item=None if ctx is None else ctx.sharding_item,
            task_id=None if ctx is None else ctx.task_id,
            sharding_parameter=None if ctx is None else ctx.sharding_parameter,
            job_parameter=None if ctx is None else ctx.job_parameter,
            error_type=type(error).__name__,
            error=str(error),
            traceback="".join(traceback.format_exception(error)),
            time=datetime.now(UTC).isoformat(timespec="milliseconds"),
        )

    @property
    def summary(self) -> str:
        item = "" if self.item is None else f" item {self.item}"
        return (
            f"shardcron job {self.job}{item} failed on {self.instance}: "
            f"{self.error_type}: {self.error}"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "text": self.summary,
            "job": self.job,
            "instance": self.instance,
            "item": self.item,
            "taskId": self.task_id,
            "shardingParameter": self.sharding_parameter,
            "jobParameter": self.job_parameter,
            "errorType": self.error_type,
            "error": self.error,
            "traceback": self.traceback,
            "time": self.time,
        }


class _Notifying:
    """Logs the failure like LOG, then delivers a report; delivery problems are only logged."""

    def __init__(self, kind: str, notify: Callable[[Failure], None], instance: str) -> None:
        self.kind = kind
        self.notify = notify
        self.instance = instance

    def __call__(self, job: str, ctx: ShardingContext | None, error: BaseException) -> None:
        log_error(job, ctx, error)
        try:
            self.notify(Failure.of(job, ctx, error, self.instance))
        except Exception as exc:  # noqa: BLE001 - a report that cannot go out must not fail the job
            log.warning(
                "job %s: the %s error handler could not deliver its report: %s: %s",
                job,
                self.kind,
                type(exc).__name__,
                exc,
            )


# -- WEBHOOK ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Webhook:
    url: str
    fmt: str
    connect_timeout: float  # seconds
    read_timeout: float
    secret: str | None = None  # DingTalk request signing
    keyword: str | None = None  # DingTalk robots only accept messages containing it

    @classmethod
    def of(cls, config: JobConfig, prefix: str, fmt: str | None = None) -> Webhook:
        """WEBHOOK reads ``webhook.*``; WECHAT and DINGTALK read ElasticJob's own prop names."""
        job = config.job_name
        native = prefix == "webhook."
        url_prop = f"{prefix}url" if native else f"{prefix}webhook"
        url = config.prop(url_prop, "").strip()
        if not url:
            raise ConfigError(f"props.{url_prop}", "required: the URL to POST reports to", job=job)
        problem = url_problem(url)
        if problem:
            raise ConfigError(f"props.{url_prop}", problem, job=job)
        if fmt is None:
            fmt = config.prop("webhook.format", "json").strip().lower()
            if fmt not in WEBHOOK_FORMATS:
                raise ConfigError(
                    "props.webhook.format",
                    f"unknown format {fmt!r}; use {', '.join(WEBHOOK_FORMATS)}",
                    job=job,
                )
        connect_prop, read_prop = (
            ("webhook.connect.timeout.milliseconds", "webhook.read.timeout.milliseconds")
            if native
            else (f"{prefix}connectTimeoutMilliseconds", f"{prefix}readTimeoutMilliseconds")
        )
        connect = positive_prop(config, connect_prop, "milliseconds, e.g. 3000") or 3000
        read = positive_prop(config, read_prop, "milliseconds, e.g. 5000") or 5000
        secret_prop = "webhook.secret" if native else f"{prefix}secret"
        keyword_prop = "webhook.keyword" if native else f"{prefix}keyword"
        return cls(
            url=url,
            fmt=fmt,
            connect_timeout=connect / 1000,
            read_timeout=read / 1000,
            secret=config.prop(secret_prop) or None,
            keyword=config.prop(keyword_prop) or None,
        )

    def payload(self, failure: Failure) -> dict[str, object]:
        text = f"{self.keyword} {failure.summary}" if self.keyword else failure.summary
        if self.fmt == "slack":
            return {"text": text}
        if self.fmt in ("dingtalk", "wechat"):
            return {"msgtype": "text", "text": {"content": text}}
        if self.fmt == "feishu":
            return {"msg_type": "text", "content": {"text": text}}
        return {**failure.to_json(), "text": text}

    def signed_url(self) -> str:
        """DingTalk's signature: HMAC-SHA256 of ``timestamp\\nsecret`` keyed by the secret."""
        if not self.secret:
            return self.url
        stamp = str(int(time.time() * 1000))
        digest = hmac.new(
            self.secret.encode(), f"{stamp}\n{self.secret}".encode(), hashlib.sha256
        ).digest()
        sign = quote(base64.b64encode(digest).decode(), safe="")
        joiner = "&" if "?" in self.url else "?"
        return f"{self.url}{joiner}timestamp={stamp}&sign={sign}"

    def __call__(self, failure: Failure) -> None:
        body = json.dumps(self.payload(failure)).encode()
        status, reason, answer = http_request(
            self.signed_url(),
            "POST",
            body,
            {"Content-Type": "application/json; charset=utf-8"},
            self.connect_timeout,
            self.read_timeout,
        )
        if status >= 400:
            excerpt = " ".join(answer.decode(errors="replace").split())[:200]
            raise OSError(f"{redact_url(self.url)} answered {status} {reason}: {excerpt}")


# -- EMAIL ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Email:
    host: str
    port: int
    use_ssl: bool
    starttls: bool
    username: str | None
    password: str | None
    sender: str
    to: tuple[str, ...]
    cc: tuple[str, ...]
    bcc: tuple[str, ...]
    subject: str | None
    timeout: float  # seconds
    allow_plaintext_login: bool = False

    @classmethod
    def of(cls, config: JobConfig) -> Email:
        job = config.job_name

        def required(name: str, what: str) -> str:
            value = config.prop(name, "").strip()
            if not value:
                raise ConfigError(f"props.{name}", f"required for EMAIL: {what}", job=job)
            return value

        def flag(name: str, default: bool) -> bool:
            raw = config.prop(name, str(default)).strip().lower()
            if raw not in ("true", "false"):
                raise ConfigError(f"props.{name}", f"must be true or false; got {raw!r}", job=job)
            return raw == "true"

        def addresses(name: str) -> tuple[str, ...]:
            found = tuple(a.strip() for a in config.prop(name, "").split(",") if a.strip())
            for address in found:
                if "@" not in address:
                    raise ConfigError(
                        f"props.{name}", f"{address!r} is not an email address", job=job
                    )
            return found

        host = required("email.host", "the SMTP server's host name")
        use_ssl = flag("email.useSsl", True)
        raw_port = config.prop("email.port", "").strip()
        if raw_port:
            if not raw_port.isdigit() or not 0 < int(raw_port) < 65536:
                raise ConfigError(
                    "props.email.port", f"must be a port number; got {raw_port!r}", job=job
                )
            port = int(raw_port)
        else:
            port = 465 if use_ssl else 25
        sender = required("email.from", "the sender address")
        if "@" not in sender:
            raise ConfigError("props.email.from", f"{sender!r} is not an email address", job=job)
        required("email.to", "comma-separated recipient addresses")
        username = config.prop("email.username") or None
        password = config.prop("email.password") or None
        if username and password is None:
            raise ConfigError("props.email.password", "required with email.username", job=job)
        timeout = positive_prop(config, "email.timeout.milliseconds", "milliseconds, e.g. 10000")
        starttls = flag("email.starttls", False)
        plaintext = flag("email.allowPlaintextLogin", False)
        if username and not use_ssl and not starttls:
            if not plaintext:
                raise ConfigError(
                    "props.email.useSsl",
                    "a login over plain SMTP would send the password in clear; set "
                    "email.useSsl: true or email.starttls: true (or, on a trusted network "
                    "only, email.allowPlaintextLogin: true)",
                    job=job,
                )
            log.warning(
                "job %s: EMAIL logs in to %s:%d over plain SMTP (email.allowPlaintextLogin): "
                "the password crosses the network in clear",
                job,
                host,
                port,
            )
        return cls(
            host=host,
            port=port,
            use_ssl=use_ssl,
            starttls=starttls,
            allow_plaintext_login=plaintext,
            username=username,
            password=password,
            sender=sender,
            to=addresses("email.to"),
            cc=addresses("email.cc"),
            bcc=addresses("email.bcc"),
            subject=config.prop("email.subject") or None,
            timeout=(timeout or 10_000) / 1000,
        )

    def message(self, failure: Failure) -> EmailMessage:
        item = "" if failure.item is None else f" item {failure.item}"
        message = EmailMessage()
        message["Subject"] = self.subject or f"[shardcron] job {failure.job}{item} failed"
        message["From"] = self.sender
        message["To"] = ", ".join(self.to)
        if self.cc:
            message["Cc"] = ", ".join(self.cc)
        details = "\n".join(
            f"{key}: {value}"
            for key, value in failure.to_json().items()
            if key not in ("text", "traceback") and value is not None
        )
        message.set_content(f"{failure.summary}\n\n{details}\n\n{failure.traceback}")
        return message

    def __call__(self, failure: Failure) -> None:
        # The system's trusted CAs and host name check: a server that cannot prove its
        # name gets no password (smtplib verifies nothing without a context).
        context = ssl.create_default_context()
        smtp: smtplib.SMTP = (
            smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout, context=context)
            if self.use_ssl
            else smtplib.SMTP(self.host, self.port, timeout=self.timeout)
        )
        with smtp:
            if self.starttls and not self.use_ssl:
                smtp.starttls(context=context)
            if self.username:
                smtp.login(self.username, self.password or "")
            smtp.send_message(self.message(failure), self.sender, [*self.to, *self.cc, *self.bcc])
