"""gunicorn with a shardcron scheduler in every worker (run from the repository root)::

    export SHARDCRON_REGISTRY=zk://127.0.0.1:2181/my-app      # shardcron zookeeper
    gunicorn -c examples/gunicorn_conf.py examples.wsgi_app:app

Each worker starts its own scheduler after the fork (post_fork) and stops it when it exits
(worker_exit), so the workers share the items of every job: each item of a fire runs once.
"""

import os

from shardcron.integrations.gunicorn import WorkerScheduler
from shardcron.scheduler.launch import scheduler_from_file

bind = "127.0.0.1:8000"
workers = 3
graceful_timeout = 30  # above the scheduler's grace, so running items can finish

jobs = WorkerScheduler(
    lambda: scheduler_from_file(
        os.environ.get("SHARDCRON_CONFIG", "examples/jobs.yaml"), shared=True
    ),
    grace=20,
)
post_fork = jobs.post_fork
worker_exit = jobs.worker_exit
