"""The README's "In tests" recipe in Django's own test classes: a burst
worker (``call_command("tether_worker", burst=True)``) inside
``django.test.TestCase``, whose test runs in a transaction that never
commits, is refused with a clear error; ``TransactionTestCase`` runs the
tasks, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.tasks import TaskResultStatus
from django.test import TestCase, TransactionTestCase
from shop import tasks

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
