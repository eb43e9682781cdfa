"""EMAIL verifies the SMTP server's certificate: a server that cannot prove its name gets
no password, over SMTPS or STARTTLS; a login over plain SMTP must be asked for."""

from __future__ import annotations

import base64
import contextlib
import datetime
import logging
import smtplib
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from shardcron.config.job import JobConfig
from shardcron.errors import ConfigError
from shardcron.execution.errorhandlers import Email, make_error_handler

USER, PASSWORD = "robot", "smtp-pa55-word"


def self_signed(tmp_path: Path) -> ssl.SSLContext:
    """A server context whose certificate names localhost but is signed by nobody trusted."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context


class FakeSmtp:
    """Speaks just enough SMTP to take a login and a mail; records every line it gets."""

    def __init__(self, context: ssl.SSLContext, implicit_tls: bool) -> None:
        self.context, self.implicit_tls = context, implicit_tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lines: list[bytes] = []

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            # A client that refuses our certificate hangs up in the handshake.
            with conn, contextlib.suppress(OSError, ssl.SSLError):
                self.converse(conn)

    def converse(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        if self.implicit_tls:
            conn = self.context.wrap_socket(conn, server_side=True)
        tls = self.implicit_tls
        conn.sendall(b"220 fake ESMTP\r\n")
        reader = conn.makefile("rb")
        while line := reader.readline():
            self.lines.append(line)
            command = line[:4].upper()
            if command in (b"EHLO", b"HELO"):
                offer = b"" if tls else b"250-STARTTLS\r\n"
                conn.sendall(b"250-fake\r\n" + offer + b"250 AUTH PLAIN LOGIN\r\n")
            elif command == b"STAR":
                conn.sendall(b"220 go ahead\r\n")
                conn = self.context.wrap_socket(conn, server_side=True)
                reader, tls = conn.makefile("rb"), True
            elif command == b"AUTH":
                conn.sendall(b"235 ok\r\n")
            elif command == b"DATA":
                conn.sendall(b"354 go\r\n")
                while (body := reader.readline()) not in (b".\r\n", b""):
                    self.lines.append(body)
                conn.sendall(b"250 queued\r\n")
            elif command == b"QUIT":
                conn.sendall(b"221 bye\r\n")
                return
            else:
                conn.sendall(b"250 ok\r\n")

    def heard_the_password(self) -> bool:
        plain = base64.b64encode(f"\0{USER}\0{PASSWORD}".encode())
        login = base64.b64encode(PASSWORD.encode())
        return any(plain in line or login in line or b"AUTH" in line for line in self.lines)


@contextmanager
def fake_smtp(tmp_path: Path, *, implicit_tls: bool) -> Iterator[FakeSmtp]:
    server = FakeSmtp(self_signed(tmp_path), implicit_tls)
    thread = threading.Thread(target=server.serve, name="fake-smtp", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        with contextlib.suppress(OSError):
            server.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept
        server.listener.close()
        thread.join(timeout=10)


def email_job(port: int, **props: str) -> JobConfig:
    base = {
        "email.host": "localhost",
        "email.port": str(port),
        "email.from": "shardcron@example.com",
        "email.to": "ops@example.com",
        "email.username": USER,
        "email.password": "${TEST_SMTP_PASSWORD}",
        "email.timeout.milliseconds": "5000",
    }
    return JobConfig(
        job_name="mailer",
        sharding_total_count=1,
        job_error_handler_type="EMAIL",
        props={**base, **props},
    )


@pytest.mark.parametrize(
    ("implicit_tls", "props"),
    [(True, {}), (False, {"email.useSsl": "false", "email.starttls": "true"})],
    ids=["smtps", "starttls"],
)
def test_a_server_with_a_self_signed_certificate_gets_no_password(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    implicit_tls: bool,
    props: dict[str, str],
) -> None:
    monkeypatch.setenv("TEST_SMTP_PASSWORD", PASSWORD)
    with fake_smtp(tmp_path, implicit_tls=implicit_tls) as server:
        # The harness is honest: a client that skips verification does give the password.
        unverified = ssl._create_unverified_context()
        with (
            smtplib.SMTP_SSL("localhost", server.port, context=unverified, timeout=5)
            if implicit_tls
            else smtplib.SMTP("localhost", server.port, timeout=5)
        ) as control:
            if not implicit_tls:
                control.starttls(context=unverified)
            control.login(USER, PASSWORD)
        assert server.heard_the_password()
        server.lines.clear()

        handler = make_error_handler(email_job(server.port, **props))
        assert handler is not None
        with caplog.at_level(logging.WARNING):
            handler("mailer", None, RuntimeError("boom"))
        assert not server.heard_the_password()
    (warning,) = [r for r in caplog.records if "could not deliver" in r.message]
    assert "CERTIFICATE_VERIFY_FAILED" in warning.message


def test_a_login_over_plain_smtp_is_refused_unless_explicitly_allowed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TEST_SMTP_PASSWORD", PASSWORD)
    with pytest.raises(ConfigError) as caught:
        make_error_handler(email_job(25, **{"email.useSsl": "false"}))
    assert caught.value.field == "props.email.useSsl" and "email.starttls" in str(caught.value)
    with caplog.at_level(logging.WARNING):
        email = Email.of(
            email_job(25, **{"email.useSsl": "false", "email.allowPlaintextLogin": "true"})
        )
    assert email.allow_plaintext_login
    assert any("over plain SMTP" in r.message for r in caplog.records)
