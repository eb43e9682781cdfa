"""FastAPI with shardcron jobs running while the app serves (run from the repository root)::

    export SHARDCRON_REGISTRY=zk://127.0.0.1:2181/my-app      # shardcron zookeeper
    uvicorn examples.fastapi_app:app --workers 3

The lifespan makes the scheduler in each server process, so uvicorn's (or gunicorn's)
workers share the items of every job.
"""

from __future__ import annotations

import os

from fastapi import FastAPI, Request

from shardcron.integrations.asgi import lifespan
from shardcron.scheduler.launch import scheduler_from_file

CONFIG = os.environ.get("SHARDCRON_CONFIG", "examples/jobs.yaml")

app = FastAPI(lifespan=lifespan(lambda: scheduler_from_file(CONFIG, shared=True)))


@app.get("/jobs")
def jobs(request: Request) -> dict[str, object]:
    """This process's instance id and the jobs it runs."""
    scheduler = request.state.scheduler
    return {"instance": scheduler.instance_id, "jobs": sorted(scheduler.runtimes)}
