"""``TetherTask``: Django's ``Task`` with tether's per-task options, which
Django 6.1's ``@task(...)`` passes on to the backend's ``task_class``:

    @task(max_attempts=5, timeout=600, retry_backoff=10)
    def send_receipt(order_id): ...

Each is None when not given: the backend's ``OPTIONS["task_options"]`` for
the task's path, else tether's default. ``TetherTaskContext`` is Django's
``TaskContext`` plus ``job``, tether's ``JobContext`` for the attempt
(progress, the cancel signal), and ``transaction()``: Django's ``atomic()``
whose commit is the attempt's success."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.transaction import atomic
from django.tasks import Task, TaskContext

from ...context import JobContext
from ...errors import ConfigError

__all__ = ["TETHER_OPTIONS", "TetherTask", "TetherTaskContext"]

#: tether's options a task may set (``@app.task``'s, less name, queue and priority)
TETHER_OPTIONS = ("max_attempts", "timeout", "lease_ttl", "retry_backoff", "retry_on")


@dataclass(frozen=True, slots=True, kw_only=True)
class TetherTask(Task):
    #: attempts before the task fails (tether's default: 3)
    max_attempts: int | None = None
    #: seconds an attempt may run (None: no limit)
    timeout: float | None = None
    #: this task's lease TTL (None: the worker's)
    lease_ttl: float | None = None
    #: seconds before the first retry, doubling; or a callable (attempt) -> seconds
    retry_backoff: float | Callable[[int], float] | None = None
    #: exceptions worth another attempt; any other fails the task at once (None: all)
    retry_on: type[BaseException] | tuple[type[BaseException], ...] | None = None
    #: at most one queued or running job per key (per call: ``using(dedup_key=...)``)
    dedup_key: str | None = None
    #: the dedup_key stays taken this long after the job ended ("1h"; per call)
    dedup_for: float | str | None = None
    #: a task not started within this long of its enqueue never starts ("10m"; per call)
    expires: float | str | None = None

    def using(self, *, dedup_key: str | None = None, max_attempts: int | None = None,
              timeout: float | None = None, dedup_for: float | str | None = None,
              expires: float | str | None = None, **django: Any) -> TetherTask:
        """Django's ``using`` (priority, queue_name, run_after, backend), and
        tether's per-call ``dedup_key`` (with ``dedup_for``), ``max_attempts``,
        ``timeout`` and ``expires``. The enqueue's result says ``duplicate``
        (``TetherTaskResult``) when a job held the key already."""
        changed: TetherTask = Task.using(self, **django)
        extra: dict[str, Any] = {k: v for k, v in {"dedup_key": dedup_key, "max_attempts": max_attempts,
                                   "timeout": timeout, "dedup_for": dedup_for,
                                   "expires": expires}.items() if v is not None}
        return replace(changed, **extra) if extra else changed


def tether_options(task: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    """The task's tether options: its own where set, else ``defaults`` (the
    backend's ``task_options`` for it)."""
    out = dict(defaults)
    names = {f.name for f in fields(task)}
    for name in TETHER_OPTIONS:
        value = getattr(task, name, None) if name in names else None
        if value is not None:
            out[name] = value
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class TetherTaskContext(TaskContext):
    #: tether's context for this attempt: ``job.progress(0.5, "half")``,
    #: ``job.cancelled``, ``job.raise_if_cancelled()``, ``job.job_id``
    job: JobContext
    #: the database alias the backend's jobs live in
    database: str = DEFAULT_DB_ALIAS
    #: True once ``transaction()`` committed: the attempt's success, whatever
    #: the task returns or raises after
    committed: bool = field(default=False, init=False, compare=False)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """``transaction.atomic()`` on the jobs' database whose commit is also
        this attempt's success (tether's ``ctx.transaction()``, on Django's
        connection): the ORM writes made in the block land once per task; an
        attempt that no longer owns its job (its lease lapsed and the job
        moved on) commits nothing and raises ``tether.StaleAttempt``. The
        outermost atomic block, once per attempt, in ``def`` tasks::

            with context.transaction():
                Order.objects.create(...)
        """
        conn = connections[self.database]
        if conn.in_atomic_block:
            raise ConfigError("context.transaction() must be the outermost atomic block (its commit is the task's "
                              "success): call it outside transaction.atomic()")
        tx = None
        try:
            with atomic(using=self.database):
                conn.ensure_connection()
                tx = self.job.transaction_on(conn.connection)
                with tx:
                    yield
        except BaseException:
            if tx is not None:
                tx.failed()
            raise
        assert tx is not None
        tx.committed()
        object.__setattr__(self, "committed", True)
