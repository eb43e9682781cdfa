"""The web console (``shardcron console``): jobs, sharding, servers and execution history,
with the lifecycle actions, behind a login. Needs the ``console`` extra (Starlette, Jinja2).

See :mod:`shardcron.console.app` for how the app is put together,
:mod:`shardcron.console.pages` for the pages and :mod:`shardcron.console.auth` for the
security model.
"""

from __future__ import annotations
