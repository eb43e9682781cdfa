"""The Django app: it only provides the ``shardcron_run`` management command."""

from __future__ import annotations

from django.apps import AppConfig


class ShardcronConfig(AppConfig):  # type: ignore[misc]  # Django ships no type hints
    name = "shardcron.integrations.django"
    label = "shardcron"
    verbose_name = "shardcron"
