"""Batches (issue 42): many jobs, one callback when they have all ended.

``with app.batch(on_complete=spec, on_success=spec) as batch: batch.add(spec)``
inserts the batch, its members and its callbacks in one transaction when the
block exits (nothing, if it raises). The ending of the last member releases
the callbacks, in that ending's statement (I9; migration 0012 of PostgreSQL,
ending.py of SQLite): ``on_complete`` whatever the members' states,
``on_success`` only if every member succeeded (it ends cancelled otherwise).
A running member adds members with ``ctx.batch.add(spec)``; they count
before the batch can complete.

The ``Tether`` app takes ``batch`` and ``get_batch`` from ``BatchesMixin``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

from .errors import ConfigError, PayloadError
from .payload import check_job_id
from .store.flows import BatchInfo, NewBatch
from .task import JobSpec, Task
from .transport import announce, due_now
from .workflows import FlowHost, registered

__all__ = ["Batch", "BatchesMixin"]


class Batch:
    """A batch being built (``app.batch(...)``, used as a ``with`` block)."""

    def __init__(self, app: FlowHost, on_complete: JobSpec | None, on_success: JobSpec | None,
                 connection: object = None) -> None:
        for role, spec in (("on_complete", on_complete), ("on_success", on_success)):
            if spec is not None:
                if not isinstance(spec, JobSpec):
                    raise ConfigError(f"batch {role}= takes a job spec, task.spec(**args), not a "
                                      f"{type(spec).__name__}")
                registered(app, spec.task)
        self.app = app
        self.on_complete = on_complete
        self.on_success = on_success
        self.connection = connection
        self._specs: list[JobSpec] = []
        self._id: int | None = None
        #: the members' job ids and the callbacks', once enqueued
        self.jobs: list[int] = []
        self.callbacks: dict[str, int] = {}

    @property
    def id(self) -> int:
        """The batch's id (the database's), once the block has exited."""
        if self._id is None:
            raise ConfigError("the batch has no id until its `with` block exits (that inserts it)")
        return self._id

    def add(self, spec: JobSpec) -> None:
        """A member: ``batch.add(task.spec(**args))``."""
        if self._id is not None:
            raise ConfigError(f"batch {self._id} was enqueued already; a running member adds with ctx.batch.add")
        if not isinstance(spec, JobSpec):
            raise ConfigError(f"batch.add() takes a job spec, task.spec(**args), not a {type(spec).__name__}")
        registered(self.app, spec.task)
        if spec.job.dedup_key is not None:
            raise ConfigError("a batch member cannot have a dedup_key (its job could be another batch's)")
        self._specs.append(spec)

    def add_many(self, task: Task[Any, Any], many: Iterable[Mapping[str, Any]]) -> None:
        """Members of one task, one per args mapping."""
        if isinstance(many, Mapping | str | bytes):
            raise PayloadError(f"add_many takes a list of args mappings, one per job, not a {type(many).__name__}")
        for kwargs in many:
            self.add(task.spec(**kwargs))

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.enqueue()

    def enqueue(self) -> int:
        """Insert the batch (what leaving the ``with`` block does); its id."""
        if not self._specs:
            raise ConfigError("an empty batch: add members with batch.add(task.spec(...)) before the block ends")
        batch = NewBatch([s.job for s in self._specs], None if self.on_complete is None else self.on_complete.job,
                         None if self.on_success is None else self.on_success.job)
        conn = None
        if self.connection is not None:
            from .store.caller import driver_connection

            conn = driver_connection(self.connection)
        self._id, self.jobs, callbacks = self.app.store.enqueue_batch(batch, conn=conn)
        roles = [r for r, s in (("on_complete", self.on_complete), ("on_success", self.on_success)) if s is not None]
        self.callbacks = dict(zip(roles, callbacks, strict=True))
        if self.app.transport.delivers and self.connection is None:
            announce(self.app.transport, due_now(list(batch.members), self.jobs))
        return self._id


class BatchesMixin:
    """``app.batch`` and ``app.get_batch``, for ``Tether``."""

    def batch(self: FlowHost, *, on_complete: JobSpec | None = None, on_success: JobSpec | None = None,
              connection: object = None) -> Batch:
        """A batch to fill in a ``with`` block; leaving the block inserts it with
        all its members in one transaction. ``on_complete``: a callback job
        released once every member has ended; ``on_success``: one released only
        if every member succeeded."""
        return Batch(self, on_complete, on_success, connection)

    def get_batch(self: FlowHost, batch_id: int) -> BatchInfo | None:
        """A batch's members' counts by state, its callbacks' job ids, and whether it has finished."""
        return self.store.get_batch(check_job_id(batch_id))
