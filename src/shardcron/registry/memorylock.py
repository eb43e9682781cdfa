"""The embedded registry's lock: ZooKeeper's recipe on a
:class:`~shardcron.registry.memory.MemoryRegistry` session."""

from __future__ import annotations

import time
from typing import Protocol, Self

from shardcron.errors import SessionExpiredError
from shardcron.registry.memoryserver import MemoryServer


class LockSession(Protocol):
    """What the lock needs of its :class:`~shardcron.registry.memory.MemoryRegistry`."""

    @property
    def server(self) -> MemoryServer: ...

    def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequential: bool = False
    ) -> str: ...

    def delete(self, path: str, *, recursive: bool = False) -> None: ...

    def _full(self, path: str) -> str: ...


class MemoryLock:
    """ZooKeeper's lock recipe: the lowest ephemeral sequential child holds the lock."""

    def __init__(self, registry: LockSession, path: str) -> None:
        self._registry = registry
        self._path = path
        self._node: str | None = None

    def acquire(self, timeout: float) -> bool:
        registry, server = self._registry, self._registry.server
        self._node = registry.create(f"{self._path}/lock-", ephemeral=True, sequential=True)
        deadline = time.monotonic() + timeout
        mine = self._node.rsplit("/", 1)[1]
        with server.changed:
            while True:
                first = min(server._nodes[registry._full(self._path)].children, default=None)
                if first == mine:
                    return True
                if registry._full(self._node) not in server._nodes:
                    raise SessionExpiredError("lock node vanished with the session")
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                server.changed.wait(left)
        self.release()
        return False

    def release(self) -> None:
        if self._node is not None:
            self._registry.delete(self._node)
            self._node = None

    def __enter__(self) -> Self:
        self.acquire(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
