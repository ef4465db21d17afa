"""A worker process of ``manage.py tether_worker --processes N``: what it
runs, found as the command finds it (``tether.cli.process_child`` calls
``backend_app`` for a supervisor started by the Django command)."""

from __future__ import annotations

from ...app import Tether

__all__ = ["backend_app"]


def backend_app(alias: str) -> Tether:
    """Django set up from the environment (DJANGO_SETTINGS_MODULE, which
    manage.py set, inherited from the supervisor), then TASKS[alias]'s app
    with every task of the backend registered."""
    import django

    django.setup()
    from django.tasks import task_backends

    from .backend import TetherBackend

    backend = task_backends[alias]
    assert isinstance(backend, TetherBackend), backend
    return backend.worker_app()
