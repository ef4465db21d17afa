"""Misspelt Django settings are refused, not ignored: a path in
``OPTIONS["task_options"]`` that names no task (the worker refuses to start,
``manage.py check`` reports it), an option name tether does not have, a
``tether_worker -q`` queue that is not in the backend's QUEUES, and a
``task_modules`` entry that is not a module path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.tasks import task_backends
from django.test import override_settings

from conftest import manage
from tether import ConfigError
from tether.contrib.django import TetherBackend

TYPO = {"shop.tasks.sendreceipt": {"max_attempts": 1}, "shop.tasks.add": {"max_attempts": 2}}


@pytest.fixture
def typo_backend() -> Iterator[str]:
    """A TASKS entry "typo" whose task_options misspell a task's path."""
    entry = {"BACKEND": "tether.contrib.django.TetherBackend", "QUEUES": ["default"],
             "OPTIONS": {"task_options": TYPO}}
    try:
        with override_settings(TASKS={**settings.TASKS, "typo": entry}):
            yield "typo"
            for backend in task_backends.all():
                backend.close()
    finally:
        for backend in task_backends.all():
            backend.close()


def test_task_options_that_name_no_task_stop_the_worker(typo_backend: str) -> None:
    backend: Any = task_backends[typo_backend]
    assert backend.unknown_task_options() == ["shop.tasks.sendreceipt"]
    with pytest.raises(ConfigError, match=r"names no task: 'shop\.tasks\.sendreceipt'"):
        backend.worker_app()
    with pytest.raises(CommandError, match=r"names no task: 'shop\.tasks\.sendreceipt'"):
        call_command("tether_worker", backend=typo_backend, burst=True)


def test_task_options_that_name_no_task_fail_the_system_check(typo_backend: str) -> None:
    found = [m for m in checks.run_checks(tags=[checks.Tags.compatibility]) if m.id == "tether.E001"]
    assert [m.msg for m in found] == ["TASKS['typo']['OPTIONS']['task_options'] names no task: "
                                      "'shop.tasks.sendreceipt'"]
    assert [m.level for m in found] == [checks.ERROR]


def test_the_projects_settings_pass_the_check() -> None:
    assert manage("check").returncode == 0


def test_task_options_with_an_unknown_option_are_refused() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"unknown option 'max_attemps' \(tether's task options: "):
        TetherBackend("x", {"OPTIONS": {"task_options": {"shop.tasks.add": {"max_attemps": 2}}}})
    with pytest.raises(ImproperlyConfigured, match="must be a dict of options"):
        TetherBackend("x", {"OPTIONS": {"task_options": {"shop.tasks.add": 2}}})


def test_worker_refuses_a_queue_outside_the_backends_queues(backend: str) -> None:
    with pytest.raises(CommandError, match=r"'emials': not a queue of TASKS\[.*\], whose QUEUES are .*emails"):
        call_command("tether_worker", backend=backend, burst=True, queues=["emails,emials"])
    done = manage("tether_worker", "--backend", backend, "--burst", "-q", "emials", check=False)
    assert done.returncode == 2 and "'emials': not a queue of TASKS" in done.stdout + done.stderr


def test_task_modules_are_module_paths() -> None:
    for wrong in (["shop.tasks:add"], ["shop/tasks.py"], "shop.tasks", [None]):
        with pytest.raises(ImproperlyConfigured, match="task_modules"):
            TetherBackend("x", {"OPTIONS": {"task_modules": wrong}})
    backend = TetherBackend("x", {"OPTIONS": {"task_modules": ["shop.tasks"]}})
    assert "shop.tasks.add" in {task.module_path for task in backend.discover()}
