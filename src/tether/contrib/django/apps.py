"""The Django app: ``"tether.contrib.django"`` in INSTALLED_APPS gives the
project ``manage.py tether_worker`` and tether's tables at ``migrate``."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class TetherConfig(AppConfig):
    name = "tether.contrib.django"
    label = "tether"
    verbose_name = "tether"

    def ready(self) -> None:
        post_migrate.connect(_migrate_after, sender=self, dispatch_uid="tether.contrib.django.migrate")


def _migrate_after(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    """After every ``migrate``: tether's own migrations that a tether upgrade
    added since this app's Django migration ran (applies only what is missing)."""
    from .backend import migrate_database

    migrate_database(using)
