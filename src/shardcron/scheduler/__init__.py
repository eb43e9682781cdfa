"""The process: one registry session, one timer, one coordinator, one worker pool.

:class:`~shardcron.scheduler.process.Scheduler` runs every job of a process;
:func:`~shardcron.scheduler.launch.scheduler_from_file` builds one from a config file.
The timer heap (:mod:`.timers`), the herd's early starts (:mod:`.startsfirst`) and signal
handling (:mod:`.stopsignals`) are its edges.

May import: everything below it (coordination, execution, tracing, observability).
"""

from __future__ import annotations

from shardcron.scheduler.launch import scheduler_from_file
from shardcron.scheduler.process import Scheduler

__all__ = ["Scheduler", "scheduler_from_file"]
