"""The ``shardcron`` command: thin, every command calls the public API.

:mod:`.main` has ``run``, ``check`` and ``demo``; :mod:`.operations` the operator's
commands (``status``, ``trigger``, ...); :mod:`.output` what they print; :mod:`.console`
``shardcron console``; :mod:`.zookeeper` ``shardcron zookeeper``.

May import: anything (it is the top layer).
"""

from __future__ import annotations

from shardcron.cli.main import main

__all__ = ["main"]
