"""The Django app: ``"tether.contrib.django"`` in INSTALLED_APPS gives the
project ``manage.py tether_worker``, tether's tables at ``migrate``, and a system
check that ``OPTIONS["task_options"]`` names tasks."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.db.models.signals import post_migrate


class TetherConfig(AppConfig):
    name = "tether.contrib.django"
    label = "tether"
    verbose_name = "tether"

    def ready(self) -> None:
        post_migrate.connect(_migrate_after, sender=self, dispatch_uid="tether.contrib.django.migrate")
        checks.register(check_task_options, checks.Tags.compatibility)


def _migrate_after(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    """After every ``migrate``: tether's own migrations that a tether upgrade
    added since this app's Django migration ran (applies only what is missing)."""
    from .backend import migrate_database

    migrate_database(using)


def check_task_options(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``manage.py check`` (and runserver, migrate): every path in a
    TetherBackend's ``OPTIONS["task_options"]`` names a task, once the apps'
    ``tasks`` modules are imported (a worker refuses to start otherwise)."""
    from .backend import tether_backends

    return [checks.Error(f"TASKS[{b.alias!r}]['OPTIONS']['task_options'] names no task: {path!r}",
                         hint="Name a task by its module path (myapp.tasks.send_welcome), defined in an installed "
                              "app's tasks module or in OPTIONS['task_modules'].",
                         id="tether.E001")
            for b in tether_backends() for path in b.unknown_task_options()]
