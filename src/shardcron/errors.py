"""Every error shardcron raises. One root, so callers can catch ``ShardcronError``."""

from __future__ import annotations

import difflib


class ShardcronError(Exception):
    """Root of all shardcron errors."""


class ConfigError(ShardcronError, ValueError):
    """An invalid job or registry setting. The message names the field and the fix."""

    def __init__(self, field: str, problem: str, *, job: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.job = job
        where = f"job {job!r}: " if job else ""
        super().__init__(f"{where}{field}: {problem}")


class RegistryError(ShardcronError):
    """The registry refused or could not perform an operation."""


class ConnectionLostError(RegistryError):
    """The connection dropped before the outcome was known; retrying may be safe."""


class SessionExpiredError(RegistryError):
    """The session is gone; its ephemeral nodes have been deleted by the server."""


class NoNodeError(RegistryError, LookupError):
    """The node does not exist."""


class NodeExistsError(RegistryError):
    """The node already exists."""


class NotEmptyError(RegistryError):
    """The node has children and cannot be deleted without ``recursive``."""


class BadVersionError(RegistryError):
    """A version check failed."""


class TransactionError(RegistryError):
    """A multi-op failed as a whole; ``index`` names the op that failed and ``cause`` why."""

    def __init__(self, index: int, op: object, cause: RegistryError) -> None:
        self.index = index
        self.op = op
        self.cause = cause
        super().__init__(f"transaction op {index} ({op!r}) failed: {type(cause).__name__}: {cause}")


class ShardingError(ShardcronError):
    """A sharding strategy failed, or produced an assignment that cannot be written."""


class ClockSkewError(ShardcronError):
    """The local clock is further from the registry's than ``maxTimeDiffSeconds`` allows."""


class JobConflictError(ShardcronError):
    """The registry already holds a different job under the same name, or the id is taken."""


class JobNotFoundError(ShardcronError, LookupError):
    """The namespace holds no job (no ``/{job}/config``) of that name; the message names
    the closest of the ``known`` jobs, or lists them."""

    def __init__(self, job: str, namespace: str, known: list[str]) -> None:
        self.job = job
        self.namespace = namespace
        self.known = known
        close = difflib.get_close_matches(job, known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"jobs: {', '.join(known) or 'none'}"
        super().__init__(f"job {job!r} not found in namespace {namespace!r}; {hint}")


class ServerNotFoundError(ShardcronError, LookupError):
    """No job of the namespace (or not ``job``, whose servers are ``known``) has that
    server IP."""

    def __init__(self, server: str, job: str | None = None, known: list[str] | None = None) -> None:
        self.server = server
        self.job = job
        self.known = known or []
        if job is None:
            super().__init__(f"no job has server {server!r}")
        else:
            listed = ", ".join(self.known) or "none"
            super().__init__(f"job {job!r} has no server {server!r}; its servers: {listed}")
