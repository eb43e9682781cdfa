"""``python manage.py shardcron_run``: a dedicated worker for the jobs of ``settings.SHARDCRON``,
with Django set up, until SIGINT/SIGTERM."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from shardcron.errors import ShardcronError
from shardcron.integrations.django import scheduler_from_settings


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no type hints
    help = "Run the shardcron jobs of settings.SHARDCRON until SIGINT or SIGTERM."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--grace", type=float, default=30.0, help="Seconds running items get on stop."
        )

    def handle(self, *args: object, **options: Any) -> None:
        try:
            scheduler = scheduler_from_settings(shared=False)
            scheduler.start()
        except ShardcronError as exc:
            raise CommandError(str(exc)) from None
        jobs = ", ".join(sorted(scheduler.runtimes)) or "no job"
        self.stderr.write(f"shardcron worker {scheduler.instance_id}: running {jobs}")
        scheduler.run_forever(options["grace"])
