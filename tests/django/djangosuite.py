"""Django's own ``tests/tasks`` suite, for tests/django/test_django_suite.py.

Django's test files are not in its wheel: they come from the sdist of the
Django that is installed (``pip download --no-binary :all: --no-deps
django==<version>``, from the package index pip is set up with), of which
only ``tests/tasks`` and Django's LICENSE are kept, in
``.django-tests/django-<version>/`` at the repository's root (gitignored).
Fetched, not vendored: the suite checks the backend against the Django it
runs with, and Django's ``tests/tasks`` changes with ``django.tasks`` from
one release to the next (messages, new tests), so a vendored copy would
test an old contract after the first upgrade. A second run reads the cache.

Importing this module (after ``django.setup()``) puts that directory on
``sys.path``, so that the suite is the package ``tasks`` whose tasks'
``module_path`` is ``tasks.tasks.noop_task``, as Django's own runner has it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from django.db import connections
from django.tasks import TaskResult
from django.test.utils import override_settings

import django
from tether.contrib.django import TetherBackend
from tether.contrib.django.testing import clear_jobs

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".django-tests"


def fetch(version: str = django.__version__) -> Path:
    """The directory holding Django ``version``'s ``tasks`` test package
    (downloaded and unpacked once)."""
    home = CACHE / f"django-{version}"
    if (home / "tasks" / "test_tasks.py").exists():
        return home
    CACHE.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                               "--disable-pip-version-check", "-q", f"django=={version}", "-d", tmp],
                              capture_output=True, text=True, timeout=600, check=False)
        sdist = next(Path(tmp).glob("[dD]jango-*.tar.gz"), None)
        if done.returncode != 0 or sdist is None:
            raise RuntimeError(f"could not download Django {version}'s sdist for its tests/tasks suite: "
                               f"{(done.stderr or done.stdout).strip()[-2000:]}")
        top = f"{sdist.name.removesuffix('.tar.gz')}/"
        unpacked = Path(tmp) / "unpacked"
        with tarfile.open(sdist) as tar:
            wanted = [m for m in tar.getmembers()
                      if m.isfile() and (m.name.startswith(f"{top}tests/tasks/") or m.name == f"{top}LICENSE")]
            tar.extractall(unpacked, members=wanted, filter="data")
        staged = Path(tmp) / "staged"
        staged.mkdir()
        shutil.move(unpacked / top / "tests" / "tasks", staged / "tasks")
        shutil.move(unpacked / top / "LICENSE", staged / "LICENSE")
        try:
            os.rename(staged, home)  # whole or not at all: another run may be fetching too
        except OSError:
            if not (home / "tasks" / "test_tasks.py").exists():
                raise
    return home


def load() -> Path:
    """``fetch()``, on ``sys.path``."""
    home = fetch()
    if str(home) not in sys.path:
        sys.path.insert(0, str(home))
    return home


class SuiteBackend(TetherBackend):
    """tether's backend as the suite's ``default``, with the one method of
    Django's DummyBackend that the suite's ``setUp`` calls: ``clear()``,
    which deletes the jobs (``clear_jobs``)."""

    def clear(self) -> None:
        clear_jobs(self.alias)


class ImmediateSuiteBackend(SuiteBackend):
    """tether's backend in the place of Django's ImmediateBackend: each
    enqueue (outside ``atomic()``) is run at once by a real tether worker in
    this process (``app.drain()``: claimed, leased, completed through the
    store), and the result returned is the job as it ends."""

    def enqueue(self, task: Any, args: Any, kwargs: dict[str, Any]) -> TaskResult:
        result = super().enqueue(task, args, kwargs)
        if not connections[self.database].in_atomic_block:  # else the worker cannot see the job yet
            self.app.drain([task.queue_name])
            result.refresh()
        return result


def tether_tasks(database: str, default: type[SuiteBackend], queues: list[str],
                 once: dict[str, dict[str, Any]]) -> override_settings:
    """``override_settings`` whose TASKS put tether's backends where Django's
    suite has its own: ``default`` (a SuiteBackend in the place of the
    DummyBackend, an ImmediateSuiteBackend in the ImmediateBackend's), and
    ``immediate``, with their jobs in the DATABASES alias ``database``.
    ``once``: the ``task_options`` that give every task of the suite one
    attempt, as Django's ImmediateBackend runs a task once."""
    timers = {"lease_ttl": 2, "heartbeat_interval": 0.5, "reaper_interval": 0.5}

    def entry(backend: type[SuiteBackend], queues: list[str]) -> dict[str, Any]:
        options = {"database": database, **timers}
        if issubclass(backend, ImmediateSuiteBackend):
            options["task_options"] = once
        return {"BACKEND": f"{__name__}.{backend.__name__}", "QUEUES": queues, "OPTIONS": options}

    return override_settings(TASKS={"default": entry(default, queues), "immediate": entry(ImmediateSuiteBackend, []),
                                    "missing": {"BACKEND": "does.not.exist"}})
