"""gunicorn for the Django example, a scheduler in every worker (run from examples/django_site)::

    export SHARDCRON_REGISTRY=zk://127.0.0.1:2181/my-app      # shardcron zookeeper
    gunicorn -c gunicorn_conf.py mysite.wsgi

post_fork sets Django up in the new worker and starts its scheduler; worker_exit stops it.
"""

import os

from shardcron.integrations.django import scheduler_from_settings
from shardcron.integrations.gunicorn import WorkerScheduler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")

bind = "127.0.0.1:8000"
workers = 3
graceful_timeout = 30

jobs = WorkerScheduler(scheduler_from_settings, grace=20)
post_fork = jobs.post_fork
worker_exit = jobs.worker_exit
