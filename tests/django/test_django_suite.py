"""Django's own Tasks test suite (``tests/tasks`` of the installed Django,
fetched by djangosuite.py) run against TetherBackend, on SQLite and
PostgreSQL.

Each of Django's test cases is subclassed with tether's backends in TASKS
where Django's suite has its own: a ``SuiteBackend`` (TetherBackend plus
the DummyBackend's ``clear()``) in the place of the DummyBackend, an
``ImmediateSuiteBackend`` (each enqueue run at once by a real tether worker
in this process) in the ImmediateBackend's. Every test runs, except those
written down in ``NOT_FOR_A_REAL_BACKEND``: each tests a trait of Django's
Dummy or Immediate backend that no backend with a real queue has (or
should have), and says which.
"""

from __future__ import annotations

import os
import unittest
from typing import Any

import pytest
from djangosuite import ImmediateSuiteBackend, SuiteBackend, load, tether_tasks

try:
    load()
except Exception as exc:  # no package index: CI must run the suite, a developer offline may not
    if os.environ.get("CI") == "true":
        raise
    pytest.skip(f"Django's tests/tasks suite is not here and could not be fetched: {exc}", allow_module_level=True)

from django.tasks import Task, task_backends
from tasks import tasks as suite_tasks
from tasks import test_dummy_backend, test_immediate_backend, test_tasks

from tether.contrib.django import TetherBackend
from tether.contrib.django.testing import clear_jobs

#: one attempt for every task of the suite on the immediate backend, as Django's runs a task once
ONCE = {t.module_path: {"max_attempts": 1} for t in vars(suite_tasks).values() if isinstance(t, Task)}

#: Django's test cases: (module, class, the backend in "default", its QUEUES)
SUITES: list[tuple[Any, str, type[SuiteBackend], list[str]]] = [
    (test_tasks, "TaskTestCase", SuiteBackend, ["default", "queue_1"]),
    (test_dummy_backend, "DummyBackendTestCase", SuiteBackend, []),
    (test_dummy_backend, "DummyBackendTransactionTestCase", SuiteBackend, []),
    (test_immediate_backend, "ImmediateBackendTestCase", ImmediateSuiteBackend, []),
    (test_immediate_backend, "ImmediateBackendTransactionTestCase", ImmediateSuiteBackend, []),
]

_IS_DUMMY = "asserts that the backend is Django's DummyBackend (isinstance)"
_IS_IMMEDIATE = "asserts that the backend is Django's ImmediateBackend (isinstance, and OPTIONS == {})"
_RESULTS = ("reads DummyBackend.results, the Dummy's in-memory list of every result (a real backend keeps "
            "them in its database: get_result() reads them, and the other tests check it)")
_MUTATES = ("changes a result in DummyBackend.results in memory and expects refresh() to see it (a real "
            "backend's result changes when its worker runs the task)")
_NO_RESULTS = ("expects NotImplementedError: the ImmediateBackend keeps no results (supports_get_result is "
               "False), tether keeps every job's")

#: The tests that cannot pass on a backend with a real queue, and why (the
#: rest must pass). Not listed, and passing, but not about tether: the tests
#: whose own override_settings puts Django's backend back (DummyBackendTestCase
#: and ImmediateBackendTestCase's test_validate_on_enqueue and
#: test_validate_on_aenqueue, and the two TransactionTestCases). Django's
#: test_custom_backend.py is not run at all: it defines backends of its own
#: (which backend TASKS names is its subject), so there is none to replace.
NOT_FOR_A_REAL_BACKEND: dict[tuple[str, str], str] = {
    ("TaskTestCase", "test_using_correct_backend"): _IS_DUMMY,
    ("TaskTestCase", "test_get_backend"): _IS_DUMMY + " and the 'immediate' one ImmediateBackend",
    ("TaskTestCase", "test_enqueue_task"): _RESULTS,
    ("TaskTestCase", "test_enqueue_task_async"): _RESULTS,
    ("DummyBackendTestCase", "test_using_correct_backend"): _IS_DUMMY + " with OPTIONS == {}",
    ("DummyBackendTestCase", "test_enqueue_task"): _RESULTS,
    ("DummyBackendTestCase", "test_enqueue_task_async"): _RESULTS,
    ("DummyBackendTestCase", "test_refresh_result"): _MUTATES,
    ("DummyBackendTestCase", "test_refresh_result_async"): _MUTATES,
    ("ImmediateBackendTestCase", "test_using_correct_backend"): _IS_IMMEDIATE,
    ("ImmediateBackendTestCase", "test_cannot_get_result"): _NO_RESULTS,
    ("ImmediateBackendTestCase", "test_cannot_refresh_result"): _NO_RESULTS,
    ("ImmediateBackendTestCase", "test_cannot_pass_run_after"): (
        "expects InvalidTask: the ImmediateBackend cannot defer a task (supports_defer is False), tether can"),
    ("ImmediateBackendTestCase", "test_throws_keyboard_interrupt"): (
        "expects the task's KeyboardInterrupt to reach the caller of enqueue(), as when the task runs in the "
        "caller's thread; a worker records it as the attempt's error"),
}

DATABASES = {"sqlite": "default", "postgresql": "pg"}


class TetherSuite:
    """Each test starts with no job left by another, and its backends'
    connections closed after it."""

    databases = frozenset(DATABASES.values())

    def setUp(self) -> None:
        clear_jobs("default")  # both of the suite's backends keep their jobs there
        super().setUp()  # type: ignore[misc]

    def tearDown(self) -> None:
        super().tearDown()  # type: ignore[misc]
        for alias in ("default", "immediate"):
            backend = task_backends[alias]
            if isinstance(backend, TetherBackend):
                backend.close()


def _suite(module: Any, name: str, default: type[SuiteBackend], queues: list[str], db: str) -> type:
    base = getattr(module, name)
    cls = type(f"{name}_{db}", (TetherSuite, base), {"__module__": __name__, "__qualname__": f"{name}_{db}"})
    for (case, test), why in NOT_FOR_A_REAL_BACKEND.items():
        if case == name:
            setattr(cls, test, unittest.skip(why)(getattr(base, test)))
    decorated: type = tether_tasks(DATABASES[db], default, queues, ONCE)(cls)
    return decorated


for _db in DATABASES:
    for _module, _name, _default, _queues in SUITES:
        _case = _suite(_module, _name, _default, _queues, _db)
        globals()[_case.__name__] = _case
del _db, _module, _name, _default, _queues, _case  # else pytest would collect _case's tests again


def test_the_written_down_tests_are_in_djangos_suite() -> None:
    """A test renamed or gone in a new Django leaves no stale entry behind."""
    classes = {name: getattr(module, name) for module, name, _, _ in SUITES}
    for case, test in NOT_FOR_A_REAL_BACKEND:
        assert callable(getattr(classes[case], test, None)), f"{case}.{test} is not in Django's suite"
