"""Test helpers for a project whose tasks run on a ``TetherBackend``.

tether's tables are not Django models, so ``TransactionTestCase``'s flush
leaves their jobs behind, for the next test's burst worker to run:
``clear_jobs()`` deletes them, in ``setUp``::

    from tether.contrib.django.testing import clear_jobs

    class SignUpTests(TransactionTestCase):
        def setUp(self) -> None:
            clear_jobs()
"""

from __future__ import annotations

from django.db import connections, transaction
from django.tasks import task_backends

from ...errors import ConfigError
from ...store.postgres.connect import quote
from .backend import TetherBackend

__all__ = ["clear_jobs"]

#: what tether keeps of jobs (a job's attempts, a rate-limited queue's starts,
#: the calls waiting for a job on PostgreSQL), jobs last
_TABLES = {"sqlite": ("attempts", "queue_starts", "jobs"),
           "postgresql": ("attempts", "queue_starts", "waiters", "jobs")}


def clear_jobs(backend: str = "default") -> None:
    """Delete every job of the TASKS entry ``backend`` (a TetherBackend), and
    their attempts, from the database they live in: for tests only (a
    worker's running jobs go too); queue settings (pause, limits), schedules
    and the workers' rows stay. Through Django's connection:
    inside ``atomic()`` (a ``TestCase``'s test), the deletes roll back with it."""
    found = task_backends[backend]
    if not isinstance(found, TetherBackend):
        raise ConfigError(f"TASKS[{backend!r}] is not a tether.contrib.django.TetherBackend")
    dsn = found.app.dsn
    if dsn.backend == "postgresql":
        tables = [f"{quote(dsn.schema)}.{quote(name)}" for name in _TABLES["postgresql"]]
    else:
        tables = [f'"tether_{name}"' for name in _TABLES["sqlite"]]
    with transaction.atomic(using=found.database), connections[found.database].cursor() as cursor:
        for table in tables:
            cursor.execute(f"DELETE FROM {table}")
