"""The README's "In tests" recipe in Django's own test classes: a burst
worker (``call_command("tether_worker", burst=True)``) inside
``django.test.TestCase``, whose test runs in a transaction that never
commits, is refused with a clear error; ``TransactionTestCase`` runs the
tasks, on SQLite and PostgreSQL, and its flush leaves tether's jobs, which
``clear_jobs()`` deletes."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import TaskResultDoesNotExist
from django.test import TestCase, TransactionTestCase
from shop import tasks

from tether.contrib.django.testing import clear_jobs
from tether.model import Outcome

BACKENDS = ("default", "pg")  # TASKS aliases; their jobs live in the databases of the same names


class InTestCase(TestCase):
    databases = frozenset(BACKENDS)

    def test_a_burst_worker_inside_the_tests_transaction_is_refused(self) -> None:
        for alias in BACKENDS:
            with self.subTest(alias):
                tasks.add.using(backend=alias, queue_name="callcmd").enqueue(a=1, b=2)
                with pytest.raises(CommandError, match="TransactionTestCase"):
                    call_command("tether_worker", backend=alias, burst=True, queues=["callcmd"])


class InTransactionTestCase(TransactionTestCase):
    databases = frozenset(BACKENDS)

    def test_a_burst_worker_runs_the_tasks(self) -> None:
        for alias in BACKENDS:
            with self.subTest(alias):
                result = tasks.add.using(backend=alias, queue_name="callcmd").enqueue(a=1, b=2)
                call_command("tether_worker", backend=alias, burst=True, queues=["callcmd"], log_level="warning")
                result.refresh()
                assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 3

    def test_a_burst_worker_inside_atomic_is_refused(self) -> None:
        for alias in BACKENDS:
            with self.subTest(alias), transaction.atomic(using=alias), pytest.raises(CommandError, match="commit"):
                call_command("tether_worker", backend=alias, burst=True, queues=["callcmd"])

    def test_flush_leaves_tethers_jobs_and_clear_jobs_deletes_them(self) -> None:
        for alias in BACKENDS:
            with self.subTest(alias):
                failed = tasks.flaky.using(backend=alias).enqueue(fail_times=1)
                call_command("tether_worker", backend=alias, burst=True, queues=["retry"], log_level="warning")
                left = tasks.add.using(backend=alias, queue_name="later").enqueue(a=1, b=2)
                call_command("flush", database=alias, interactive=False, inhibit_post_migrate=True)
                assert task_backends[alias].get_result(left.id).status == TaskResultStatus.READY
                clear_jobs(alias)
                for gone in (failed, left):
                    with pytest.raises(TaskResultDoesNotExist):
                        task_backends[alias].get_result(gone.id)
                store = task_backends[alias].app.store  # (a burst worker closes the app it ran)
                assert store.list_jobs(limit=10) == [] and store.recent_attempts(list(Outcome), limit=10) == []
                again = tasks.add.using(backend=alias, queue_name="callcmd").enqueue(a=2, b=2)
                call_command("tether_worker", backend=alias, burst=True, queues=["callcmd"], log_level="warning")
                again.refresh()
                assert again.status == TaskResultStatus.SUCCESSFUL and again.return_value == 4
