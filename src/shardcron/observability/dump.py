"""The dump service: a job's registry subtree as text, over a plain TCP line protocol.

ElasticJob's snapshot service (reference §1.13), kept wire compatible so ``nc`` and the
Java ``JobOperateAPI.dump`` client work against a shardcron worker::

    $ echo "dump@orders" | nc 127.0.0.1 9888
    ...
    /orders/sharding/0/instance | ip1@-@4242
    /orders/servers/ip1 | ENABLED
    ...

* The client sends one line, ``dump@{jobName}``; any other line is closed unanswered.
* The answer is one ``{path} | {value}`` line per node below ``/{jobName}``, depth first,
  children in reverse name order (as Java's registry client lists them), then ``\\n``, then
  the connection closes. An unknown job gives an empty answer, as in Java.
* Every IPv4 address is replaced by ``ip1``, ``ip2``, ... in order of first appearance, the
  same address getting the same name throughout the dump, so a dump can be posted in a bug
  report. Unlike Java's pattern, an address is only matched whole (``10.0.0.12`` is never
  read as ``10.0.0.1`` followed by ``2``).

Java also appends the value its local cache holds when that differs from the registry's;
shardcron dumps what the registry holds, only (a worker's cache is private to each job
runtime). The port is opt-in and binds to loopback unless told otherwise. It answers
anyone who can connect with what this worker's (possibly digest-authenticated) session
can read, so every local user of the host can ask: secrets are redacted from the answer,
and a line that is not ``dump@{job}`` is closed unanswered, never with a traceback.

``shardcron dump JOB`` reads the registry directly with :func:`dump_job` (no worker
needed), or asks a worker's port with :func:`request_dump`.
"""

from __future__ import annotations

import logging
import re
import socket
import socketserver
import threading
from collections.abc import Iterable
from typing import Protocol

from shardcron.config.secrecy import redact_text
from shardcron.coordination.paths import JobPaths

log = logging.getLogger(__name__)

COMMAND_PREFIX = "dump@"
SEPARATOR = " | "
# How long a connected client may take to send its line.
CLIENT_TIMEOUT_SECONDS = 5.0

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(rf"(?<![0-9.]){_OCTET}(?:\.{_OCTET}){{3}}(?![0-9]|\.[0-9])")


class _Reader(Protocol):
    def get(self, path: str) -> bytes | None: ...
    def children(self, path: str) -> list[str]: ...


Entry = tuple[str, str]  # (path, value)


def snapshot(reader: _Reader, job: str) -> list[Entry]:
    """Every node below ``/{job}`` with its value, in the dump's order (empty if no job)."""
    entries: list[Entry] = []

    def walk(path: str) -> None:
        for name in sorted(reader.children(path), reverse=True):
            child = f"{path}/{name}"
            value = reader.get(child)
            if value is None:
                continue  # deleted while we walked
            entries.append((child, value.decode("utf-8", errors="replace")))
            walk(child)

    walk(JobPaths(job).root)
    return entries


def mask_ips(entries: Iterable[Entry]) -> list[Entry]:
    """Each IPv4 address as ``ip{n}``, numbered by first appearance over the whole dump."""
    names: dict[str, str] = {}

    def fake(match: re.Match[str]) -> str:
        return names.setdefault(match.group(0), f"ip{len(names) + 1}")

    return [(_IPV4.sub(fake, path), _IPV4.sub(fake, value)) for path, value in entries]


def render(entries: Iterable[Entry]) -> str:
    """The wire text: one ``path | value`` line per node, then a newline."""
    return "\n".join(f"{path}{SEPARATOR}{value}" for path, value in entries) + "\n"


def dump_job(reader: _Reader, job: str, *, mask: bool = True) -> str:
    """The dump text of ``job`` read from ``reader`` (a registry), IPs masked by default,
    secrets (``key: value`` of a secret-named key, URL passwords and tokens) always."""
    entries = [(path, redact_text(value)) for path, value in snapshot(reader, job)]
    return render(mask_ips(entries) if mask else entries)


def request_dump(host: str, port: int, job: str, timeout: float = 5.0) -> str:
    """Ask a worker's dump port for ``job``'s dump (Java's ``JobOperateAPI.dump``)."""
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.sendall(f"{COMMAND_PREFIX}{job}\n".encode())
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


class DumpServer:
    """Answers ``dump@{job}`` lines on a TCP port from one registry session.

    ``port=0`` picks a free port; :attr:`port` tells which once started.
    """

    def __init__(self, registry: _Reader, port: int, host: str = "127.0.0.1") -> None:
        self.registry = registry
        self.host = host
        self._requested_port = port
        self._server: socketserver.ThreadingTCPServer | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            return self._requested_port
        return int(self._server.server_address[1])

    def start(self) -> DumpServer:
        server = _Server((self.host, self._requested_port), self.registry)
        self._server = server
        threading.Thread(target=server.serve_forever, name="shardcron-dump", daemon=True).start()
        log.info("dump service listening on %s:%d", self.host, self.port)
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, address: tuple[str, int], registry: _Reader) -> None:
        super().__init__(address, _Handler)
        self.registry = registry


class _Handler(socketserver.StreamRequestHandler):
    timeout = CLIENT_TIMEOUT_SECONDS
    server: _Server

    def handle(self) -> None:
        try:
            job = _job_of(self.rfile.readline(4096).decode("utf-8", errors="replace"))
        except OSError:
            return  # the client went away or never sent a line
        if job is None:
            return
        try:
            text = dump_job(self.server.registry, job)
            self.wfile.write(text.encode())
        except OSError:
            return  # the client went away
        except Exception as exc:  # noqa: BLE001 - any input gets an answer or a close, no traceback
            log.warning("dump of job %r failed: %s: %s", job, type(exc).__name__, exc)


def _job_of(line: str) -> str | None:
    line = line.rstrip("\r\n")
    if not line.startswith(COMMAND_PREFIX):
        return None
    job = line[len(COMMAND_PREFIX) :]
    # A job name is one registry node name: no path tricks (dump@.., dump@/) reach the walk.
    if not job or "/" in job or job in (".", "..") or any(ord(ch) < 0x20 for ch in job):
        return None
    return job
