"""A worker's card: what the console's worker page shows about one process.

ElasticJob's layout only knows jobs, so a worker publishes its card in an ephemeral node of
its own, ``/shardcron-workers/{instance}`` (Java lists only root children that have a
``config``, so it never sees it). The card is JSON: host name, IP, pid, shardcron and Python
versions, start time, the size of the worker pool and the items running now. Nothing in it
is secret, and a reader only parses JSON from it.

The pool figure changes with every item, so it is republished at most every few seconds,
and only when it changed; the card comes back by itself after a session expiry.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata

from shardcron.errors import NodeExistsError, RegistryError
from shardcron.model import instance_ip
from shardcron.registry import Registry, SessionState

log = logging.getLogger(__name__)

WORKERS_ROOT = "/shardcron-workers"
REFRESH_SECONDS = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Card:
    instance_id: str
    host: str
    ip: str
    pid: int
    version: str
    python: str
    started_at: float  # epoch seconds
    pool_size: int
    items_running: int

    @property
    def uptime_seconds(self) -> float:
        return max(0.0, time.time() - self.started_at)


def card_path(instance_id: str) -> str:
    return f"{WORKERS_ROOT}/{instance_id}"


def parse_card(value: bytes) -> Card | None:
    """The card in a node's value; None when it is not one (never raises)."""
    try:
        data = json.loads(value.decode("utf-8"))
        return Card(**{key: data[key] for key in Card.__dataclass_fields__})
    except (ValueError, TypeError, KeyError):
        return None


def read_cards(registry: Registry) -> dict[str, Card]:
    cards = {}
    for name in registry.children(WORKERS_ROOT):
        card = parse_card(registry.get(card_path(name)) or b"")
        if card is not None:
            cards[name] = card
    return cards


def _version() -> str:
    try:
        return metadata.version("shardcron")
    except metadata.PackageNotFoundError:
        return "unknown"


class WorkerCard:
    """Keeps the card of one worker published. ``pool_use`` says how many pool threads are
    running items now: read from the pool when the card is made, not counted from item
    events, which would cost every item two calls and a lock on the fire path."""

    def __init__(
        self, registry: Registry, instance_id: str, pool_size: int, pool_use: Callable[[], int]
    ) -> None:
        self.registry = registry
        self.instance_id = instance_id
        self.pool_size = pool_size
        self.pool_use = pool_use
        self.started_at = time.time()
        self._published: Card | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def card(self) -> Card:
        return Card(
            instance_id=self.instance_id,
            host=socket.gethostname(),
            ip=instance_ip(self.instance_id),
            pid=os.getpid(),
            version=_version(),
            python=platform.python_version(),
            started_at=self.started_at,
            pool_size=self.pool_size,
            items_running=self.pool_use(),
        )

    def start(self) -> None:
        self.registry.add_session_listener(self._on_session)
        self.publish()
        self._thread = threading.Thread(target=self._loop, name="shardcron-card", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is None:
            return  # never started
        self._thread.join(REFRESH_SECONDS + 1)
        with contextlib.suppress(RegistryError):  # ephemeral: it goes with the session anyway
            self.registry.delete(card_path(self.instance_id))

    def publish(self, *, force: bool = True) -> None:
        card = self.card()
        if not force and card == self._published:
            return
        value = json.dumps(asdict(card), sort_keys=True).encode()
        path = card_path(self.instance_id)
        try:
            try:
                self.registry.create(path, value, ephemeral=True)
            except NodeExistsError:
                self.registry.put(path, value)
            self._published = card
        except RegistryError as exc:
            log.debug("worker card not published: %s", exc)

    def _on_session(self, state: SessionState) -> None:
        if state in (SessionState.CONNECTED, SessionState.RECONNECTED) and not self._stop.is_set():
            # After an expiry the ephemeral card is gone; publish from a thread of our own.
            threading.Thread(target=self.publish, name="shardcron-card-again", daemon=True).start()

    def _loop(self) -> None:
        while not self._stop.wait(REFRESH_SECONDS):
            self.publish(force=False)
