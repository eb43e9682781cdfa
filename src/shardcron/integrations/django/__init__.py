"""Django integration: add ``"shardcron.integrations.django"`` to ``INSTALLED_APPS`` and say
where the jobs are::

    SHARDCRON = {
        "CONFIG": BASE_DIR / "jobs.yaml",  # the shardcron config file
        "REGISTRY": None,  # zk://...; None reads $SHARDCRON_REGISTRY, then the file
    }

Then either run dedicated workers with ``python manage.py shardcron_run``, or start one
scheduler in each gunicorn worker with :func:`scheduler_from_settings` and
:class:`shardcron.integrations.gunicorn.WorkerScheduler`. Nothing starts from
``AppConfig.ready()``: that also runs for ``migrate``, the shell and the autoreloader's parent.
"""

from __future__ import annotations

from collections.abc import Mapping

from shardcron.errors import ConfigError
from shardcron.scheduler.launch import scheduler_from_file
from shardcron.scheduler.process import Scheduler

SETTING = "SHARDCRON"


def scheduler_from_settings(*, shared: bool = True) -> Scheduler:
    """A scheduler (not started) for ``settings.SHARDCRON``; sets Django up if needed, so it
    works from a gunicorn hook before the WSGI application is loaded.

    ``shared=True`` refuses the embedded registry (several processes would each run every item).
    """
    import django
    from django.conf import settings

    django.setup()  # idempotent; job code may use the ORM and the app registry
    options = getattr(settings, SETTING, None)
    if not isinstance(options, Mapping) or not options.get("CONFIG"):
        raise ConfigError(
            SETTING, 'set SHARDCRON = {"CONFIG": BASE_DIR / "jobs.yaml"} in your Django settings'
        )
    return scheduler_from_file(options["CONFIG"], registry=options.get("REGISTRY"), shared=shared)
