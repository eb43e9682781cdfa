"""Error handlers: LOG, THROW, IGNORE, WEBHOOK (local HTTP server) and EMAIL (local SMTP sink)."""

from __future__ import annotations

import base64
import email
import hashlib
import hmac
import json
import logging
import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import Message
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from shardcron.config.job import JobConfig
from shardcron.errors import ConfigError
from shardcron.execution.errorhandlers import make_error_handler
from shardcron.model import ShardingContext, default_instance_id
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer
from tests import job_samples
from tests.helpers import wait_until
from tests.job_samples import fleet, http_sink

A, B = "127.0.0.1@-@3101", "127.0.0.2@-@3102"


def handled(kind: str, **props: str) -> JobConfig:
    return JobConfig(
        job_name="broken", sharding_total_count=2, job_error_handler_type=kind, props=props
    )


def context(item: int = 1) -> ShardingContext:
    return ShardingContext(
        job_name="broken",
        task_id="broken@-@1@-@READY@-@127.0.0.1@-@1",
        sharding_total_count=2,
        job_parameter="jp",
        sharding_item=item,
        sharding_parameter="east",
    )


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- a tiny SMTP sink -------------------------------------------------------------------------


@dataclass
class Mail:
    sender: str
    recipients: list[str]
    message: Message


@dataclass
class SmtpSink:
    """Speaks just enough SMTP for smtplib: EHLO, AUTH PLAIN, MAIL, RCPT, DATA, QUIT."""

    mails: list[Mail] = field(default_factory=list)
    logins: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def received(self) -> list[Mail]:
        with self.lock:
            return list(self.mails)


@contextmanager
def smtp_sink() -> Iterator[tuple[SmtpSink, int]]:
    sink = SmtpSink()

    class Handler(socketserver.StreamRequestHandler):
        def reply(self, line: str) -> None:
            self.wfile.write(line.encode() + b"\r\n")

        def handle(self) -> None:
            self.reply("220 sink ESMTP")
            sender, recipients = "", []
            while line := self.rfile.readline():
                command = line.decode().strip()
                verb = command.split(" ", 1)[0].upper()
                if verb == "EHLO":
                    self.wfile.write(b"250-sink\r\n250-AUTH PLAIN\r\n250 OK\r\n")
                elif verb == "AUTH":
                    _, user, password = base64.b64decode(command.split()[2]).split(b"\0")
                    with sink.lock:
                        sink.logins.append((user.decode(), password.decode()))
                    self.reply("235 accepted")
                elif verb == "MAIL":
                    sender = command.split(":", 1)[1].strip().strip("<>")
                    self.reply("250 OK")
                elif verb == "RCPT":
                    recipients.append(command.split(":", 1)[1].strip().strip("<>"))
                    self.reply("250 OK")
                elif verb == "DATA":
                    self.reply("354 go on")
                    lines = []
                    while (data := self.rfile.readline()) not in (b".\r\n", b""):
                        lines.append(data[1:] if data.startswith(b"..") else data)
                    with sink.lock:
                        sink.mails.append(
                            Mail(sender, recipients, email.message_from_bytes(b"".join(lines)))
                        )
                    sender, recipients = "", []
                    self.reply("250 queued")
                elif verb == "QUIT":
                    self.reply("221 bye")
                    return
                else:
                    self.reply("250 OK")

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        yield sink, int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


# -- on two instances -------------------------------------------------------------------------


def test_webhook_posts_one_report_per_failed_item_on_two_instances(
    zookeeper: ZooKeeperServer,
) -> None:
    with http_sink() as sink, fleet(zookeeper) as f:
        config = handled("WEBHOOK", **{"webhook.url": sink.url("/alerts")})
        for instance in (A, B):
            f.start(instance, lambda s: s.add_job(config, job_samples.failing))
        f.trigger("broken")
        runs = f.wait_finished("broken", 2)
        wait_until(lambda: len(sink.received()) >= 2, what="2 reports")
        requests = sink.received()
    assert not any(r.success for r in runs)
    assert {r.instance for r in runs} == {A, B}
    payloads = sorted((json.loads(r.body) for r in requests), key=lambda p: int(p["item"]))
    assert [(p["job"], p["item"]) for p in payloads] == [("broken", 0), ("broken", 1)]
    for request, payload in zip(requests, payloads, strict=True):
        assert request.method == "POST" and request.path == "/alerts"
        assert request.headers["Content-Type"].startswith("application/json")
        assert payload["errorType"] == "RuntimeError"
        assert payload["error"] == f"boom on item {payload['item']}"
        assert "Traceback" in payload["traceback"] and payload["time"]
        assert payload["text"].startswith(f"shardcron job broken item {payload['item']} failed")
    # The scheduler does not pass its instance id to the handler yet; see the report.
    assert {p["instance"] for p in payloads} <= {A, B, default_instance_id()}


def test_email_mails_one_report_per_failed_item_on_two_instances(
    zookeeper: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_SMTP_PASSWORD", "s3cret")
    with smtp_sink() as (sink, port), fleet(zookeeper) as f:
        config = handled(
            "EMAIL",
            **{
                "email.host": "127.0.0.1",
                "email.port": str(port),
                "email.useSsl": "false",
                "email.allowPlaintextLogin": "true",  # the sink speaks plain SMTP
                "email.username": "robot",
                "email.password": "${TEST_SMTP_PASSWORD}",
                "email.from": "shardcron@example.com",
                "email.to": "ops@example.com, dev@example.com",
                "email.cc": "lead@example.com",
                "email.bcc": "audit@example.com",
            },
        )
        for instance in (A, B):
            f.start(instance, lambda s: s.add_job(config, job_samples.failing))
        f.trigger("broken")
        f.wait_finished("broken", 2)
        wait_until(lambda: len(sink.received()) >= 2, what="2 mails")
        mails = sink.received()
    assert sink.logins == [("robot", "s3cret")] * 2
    subjects = sorted(str(m.message["Subject"]) for m in mails)
    assert subjects == [
        "[shardcron] job broken item 0 failed",
        "[shardcron] job broken item 1 failed",
    ]
    for mail in mails:
        assert mail.sender == "shardcron@example.com"
        assert sorted(mail.recipients) == sorted(
            ["ops@example.com", "dev@example.com", "lead@example.com", "audit@example.com"]
        )
        assert mail.message["To"] == "ops@example.com, dev@example.com"
        assert mail.message["Cc"] == "lead@example.com"
        assert mail.message["Bcc"] is None
        body = mail.message.get_payload(decode=True)
        assert isinstance(body, bytes) and b"RuntimeError: boom on item" in body


def test_throw_fails_the_item_and_the_scheduler_keeps_firing(zookeeper: ZooKeeperServer) -> None:
    with fleet(zookeeper) as f:
        for instance in (A, B):
            f.start(instance, lambda s: s.add_job(handled("THROW"), job_samples.failing))
        f.trigger("broken")
        f.wait_finished("broken", 2)
        wait_until(lambda: not f.admin.children("/broken/trigger"), what="triggers consumed")
        f.trigger("broken")  # both instances still take fires
        runs = f.wait_finished("broken", 4)
        assert all(isinstance(r.error, RuntimeError) for r in runs)
        assert {r.instance for r in runs} == {A, B}
        assert all("broken" in s.runtimes for s in f.schedulers.values())


# -- LOG, THROW, IGNORE -----------------------------------------------------------------------


def test_log_logs_the_error_with_job_and_item(caplog: pytest.LogCaptureFixture) -> None:
    handler = make_error_handler(handled("LOG"))
    assert handler is not None
    handler("broken", context(1), RuntimeError("kaput"))
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage() == "job broken item 1 failed: kaput" and record.exc_info


def test_ignore_logs_nothing_above_debug(caplog: pytest.LogCaptureFixture) -> None:
    handler = make_error_handler(handled("IGNORE"))
    assert handler is not None
    handler("broken", context(), RuntimeError("kaput"))
    assert [r for r in caplog.records if r.levelno > logging.DEBUG] == []


def test_throw_reraises_the_very_error() -> None:
    handler = make_error_handler(handled("THROW"))
    assert handler is not None
    for ctx in (context(), None):
        error = RuntimeError("kaput")
        with pytest.raises(RuntimeError) as raised:
            handler("broken", ctx, error)
        assert raised.value is error


def test_no_type_means_the_scheduler_default() -> None:
    assert make_error_handler(JobConfig(job_name="x", sharding_total_count=1)) is None


# -- WEBHOOK formats and failures -------------------------------------------------------------


def test_webhook_report_names_the_instance_it_is_given() -> None:
    with http_sink() as sink:
        handler = make_error_handler(handled("WEBHOOK", **{"webhook.url": sink.url("/")}), A)
        assert handler is not None
        handler("broken", context(1), RuntimeError("kaput"))
        (request,) = sink.received()
    payload = json.loads(request.body)
    assert payload["instance"] == A
    assert payload["shardingParameter"] == "east" and payload["jobParameter"] == "jp"
    assert payload["taskId"] == "broken@-@1@-@READY@-@127.0.0.1@-@1"


@pytest.mark.parametrize(
    ("fmt", "shape"),
    [
        ("slack", lambda text: {"text": text}),
        ("wechat", lambda text: {"msgtype": "text", "text": {"content": text}}),
        ("feishu", lambda text: {"msg_type": "text", "content": {"text": text}}),
    ],
)
def test_webhook_formats_for_chat_robots(fmt: str, shape: object) -> None:
    with http_sink() as sink:
        config = handled("WEBHOOK", **{"webhook.url": sink.url("/robot"), "webhook.format": fmt})
        handler = make_error_handler(config, A)
        assert handler is not None
        handler("broken", context(1), RuntimeError("kaput"))
        (request,) = sink.received()
    text = f"shardcron job broken item 1 failed on {A}: RuntimeError: kaput"
    assert callable(shape) and json.loads(request.body) == shape(text)


def test_dingtalk_reports_are_signed_and_carry_the_keyword() -> None:
    with http_sink() as sink:
        config = handled(
            "DINGTALK",
            **{
                "dingtalk.webhook": sink.url("/robot/send?access_token=t"),
                "dingtalk.secret": "SEC123",
                "dingtalk.keyword": "shardcron",
            },
        )
        handler = make_error_handler(config, A)
        assert handler is not None
        handler("broken", None, RuntimeError("registry lost"))
        (request,) = sink.received()
    query = parse_qs(urlsplit(request.path).query)
    stamp, sign = query["timestamp"][0], query["sign"][0]
    expected = hmac.new(b"SEC123", f"{stamp}\nSEC123".encode(), hashlib.sha256).digest()
    assert base64.b64decode(unquote(sign)) == expected and query["access_token"] == ["t"]
    body = json.loads(request.body)
    assert body["msgtype"] == "text"
    assert body["text"]["content"].startswith("shardcron shardcron job broken failed on")


@pytest.mark.parametrize(
    "config",
    [
        handled("WEBHOOK", **{"webhook.url": f"http://127.0.0.1:{closed_port()}/"}),
        handled(
            "EMAIL",
            **{
                "email.host": "127.0.0.1",
                "email.port": str(closed_port()),
                "email.useSsl": "false",
                "email.from": "a@example.com",
                "email.to": "b@example.com",
            },
        ),
    ],
    ids=["webhook", "email"],
)
def test_a_handler_that_cannot_deliver_logs_and_returns(
    config: JobConfig, caplog: pytest.LogCaptureFixture
) -> None:
    handler = make_error_handler(config, A)
    assert handler is not None
    handler("broken", context(), RuntimeError("kaput"))  # must not raise
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "could not deliver its report" in warnings[0]
    assert "ConnectionRefusedError" in warnings[0]


def test_a_webhook_answering_an_error_status_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with http_sink() as sink:
        handler = make_error_handler(
            handled("WEBHOOK", **{"webhook.url": sink.url("/status/500")}), A
        )
        assert handler is not None
        handler("broken", context(), RuntimeError("kaput"))
    assert any("answered 500" in r.getMessage() for r in caplog.records)


# -- start-up validation ----------------------------------------------------------------------

MAIL = {
    "email.host": "smtp.example.com",
    "email.from": "a@example.com",
    "email.to": "b@example.com",
}


@pytest.mark.parametrize(
    ("kind", "props", "field"),
    [
        ("WEBHOOK", {}, "props.webhook.url"),
        ("WEBHOOK", {"webhook.url": "mailto:x@example.com"}, "props.webhook.url"),
        (
            "WEBHOOK",
            {"webhook.url": "http://h/", "webhook.format": "morse"},
            "props.webhook.format",
        ),
        (
            "WEBHOOK",
            {"webhook.url": "http://h/", "webhook.read.timeout.milliseconds": "-5"},
            "props.webhook.read.timeout.milliseconds",
        ),
        ("WECHAT", {}, "props.wechat.webhook"),
        ("DINGTALK", {"dingtalk.webhook": "robot"}, "props.dingtalk.webhook"),
        ("EMAIL", {**MAIL, "email.host": ""}, "props.email.host"),
        ("EMAIL", {**MAIL, "email.from": "nobody"}, "props.email.from"),
        ("EMAIL", {**MAIL, "email.to": ""}, "props.email.to"),
        ("EMAIL", {**MAIL, "email.to": "ops@example.com,ops"}, "props.email.to"),
        ("EMAIL", {**MAIL, "email.port": "smtp"}, "props.email.port"),
        ("EMAIL", {**MAIL, "email.useSsl": "maybe"}, "props.email.useSsl"),
        ("EMAIL", {**MAIL, "email.username": "u"}, "props.email.password"),
        ("NOTIFY", {}, "jobErrorHandlerType"),
    ],
)
def test_bad_handler_props_are_one_line_config_errors(
    kind: str, props: dict[str, str], field: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        make_error_handler(handled(kind, **props))
    assert caught.value.field == field
    assert str(caught.value).startswith("job 'broken': ") and "\n" not in str(caught.value)


def test_a_job_with_bad_handler_props_does_not_start_but_the_others_do() -> None:
    scheduler = Scheduler("memory://handlers")
    scheduler.add_job(handled("EMAIL", **{"email.host": "smtp.example.com"}), job_samples.record)
    scheduler.add_job(JobConfig(job_name="fine", sharding_total_count=1), job_samples.record)
    scheduler.start()
    try:
        assert set(scheduler.runtimes) == {"fine"}
        failure = scheduler.failed["broken"]
        assert isinstance(failure, ConfigError) and failure.field == "props.email.from"
    finally:
        scheduler.stop(grace=1)
