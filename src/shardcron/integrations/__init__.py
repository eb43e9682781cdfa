"""Running a scheduler inside a web application: one per process, started after the fork.

* :mod:`shardcron.integrations.asgi`: a Starlette/FastAPI ``lifespan``.
* :mod:`shardcron.integrations.gunicorn`: ``post_fork`` / ``worker_exit`` hooks.
* :mod:`shardcron.integrations.django`: an app with settings, a management command, and a
  scheduler factory for the gunicorn hooks.

Each worker process is one instance with its own registry session, so a job's items are
shared among the workers: every item of a fire runs once, in one of them. None of these
modules imports its framework until used, so installing shardcron pulls in none of them.
"""
