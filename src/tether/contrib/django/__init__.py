"""Django's Tasks framework (``django.tasks``, Django 6) on tether: the jobs
live in the project's own database, an enqueue joins the caller's
``transaction.atomic()``, and workers keep tether's leases, fencing, retries,
timeouts and cancel.

    INSTALLED_APPS = [..., "tether.contrib.django"]
    TASKS = {"default": {"BACKEND": "tether.contrib.django.TetherBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"lease_ttl": 30}}}

``manage.py migrate`` creates tether's tables, ``manage.py tether_worker``
runs a worker (``tether worker``'s options). Modules: ``backend`` (the
backend), ``task`` (``TetherTask``: tether's options on ``@task``),
``results`` (tether's jobs as ``TaskResult``s), ``handler`` (what a worker
runs for a task), ``dsn`` (tether's URL from ``DATABASES``), ``command``
(the worker command), ``testing`` (``clear_jobs()`` between tests).
Importing ``tether`` never imports Django; importing this package does not
either, until ``TetherBackend`` is asked for.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TetherBackend", "TetherTask", "TetherTaskContext"]


def __getattr__(name: str) -> Any:
    if name == "TetherBackend":
        from .backend import TetherBackend

        return TetherBackend
    if name in ("TetherTask", "TetherTaskContext"):
        from . import task

        return getattr(task, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
