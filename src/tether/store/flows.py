"""Workflows: jobs that wait for jobs (issue 42; I9), as the store sees them.

A part of the store interface (``Store`` inherits ``Workflows``), in a module
of its own. A workflow's steps are inserted in one transaction: the jobs
(those with dependencies in the state ``waiting``, which no claim takes), the
edges (``job_deps``), each waiting job's count of dependencies still pending
(``job_waits``) and the step names (``workflow_steps``). The release is no
operation here: the statement or transaction that ends a job releases what
waits for it (PostgreSQL: queries.sql's ``_ending``; SQLite: ending.py).

The defaults refuse, as a tether server must for now: its store has no
workflow endpoints yet.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..errors import ConfigError
from ..model import JobState, NewJob

__all__ = ["BATCH_SHARDS", "ON_FAILURE", "BatchInfo", "Batches", "FlowListener", "FlowLookups", "FlowsEnded", "NewBatch",
           "NewWorkflow", "StepInfo", "WorkflowInfo", "Workflows", "batch_edge", "flow_of_row"]

log = logging.getLogger("tether.store")

#: a step's policy when a dependency ends dead or cancelled
ON_FAILURE = ("cancel", "run")


@dataclass(frozen=True, slots=True)
class NewWorkflow:
    """A workflow as the app hands it to the store: its steps in order (each a
    job, a name, the indexes of the steps it waits for, and its on_failure)."""

    name: str
    jobs: Sequence[NewJob]
    names: Sequence[str]
    after: Sequence[Sequence[int]]
    on_failure: Sequence[str]

    def link_params(self, workflow_id: int, ids: Sequence[int]) -> dict[str, Any]:
        """The parameters of the statement that records the steps, edges and counts."""
        waiting = [i for i, ups in enumerate(self.after) if ups]
        return {
            "workflow": workflow_id, "jobs": list(ids), "names": list(self.names),
            "ups": [ids[u] for ups in self.after for u in ups],
            "downs": [ids[i] for i, ups in enumerate(self.after) for _ in ups],
            "waiting": [ids[i] for i in waiting],
            "pending": [len(set(self.after[i])) for i in waiting],
            "policies": [self.on_failure[i] for i in waiting],
        }


@dataclass(frozen=True, slots=True)
class StepInfo:
    """One step of a workflow run: its job, the job's state, the steps it waits for."""

    name: str
    job_id: int
    state: JobState | None  # None: the job was deleted (retention)
    after: tuple[str, ...]
    on_failure: str


@dataclass(frozen=True, slots=True)
class WorkflowInfo:
    """``app.get_workflow(run_id)``: the run's steps, in the order they were added."""

    id: int
    name: str
    created_at: datetime
    steps: list[StepInfo] = field(default_factory=list)

    @property
    def jobs(self) -> dict[str, int]:
        """{step name: job id}"""
        return {s.name: s.job_id for s in self.steps}

    @property
    def edges(self) -> list[tuple[str, str]]:
        """(upstream step, step) for every dependency."""
        return [(u, s.name) for s in self.steps for u in s.after]

    @property
    def finished(self) -> bool:
        """Every step's job has ended (or was deleted)."""
        return all(s.state is None or s.state.terminal for s in self.steps)


@dataclass(frozen=True, slots=True)
class FlowsEnded:
    """What one ending statement (or SQLite transaction) did for workflows and
    batches, once it has committed: the runs and batches it finished (each is
    finished by exactly one statement: the one that took its count of open
    steps or pending shards to zero) and the waiting steps and callbacks it
    queued, as (job id, queue) (so too the members ``ctx.batch.add``
    inserted: ``added``). The store hands it to its flow listeners in
    the process that ran the statement: the app's emits ``workflow.finished``
    and ``batch.finished`` and publishes the released jobs on a delivering
    transport."""

    workflows: tuple[int, ...] = ()
    batches: tuple[int, ...] = ()
    released: tuple[tuple[int, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.workflows or self.batches or self.released)

    @classmethod
    def added(cls, jobs: Sequence[NewJob], ids: Sequence[int]) -> FlowsEnded:
        """Members a running member added (ctx.batch.add), committed: those due
        now are announced as a release is (a delivering transport publishes them)."""
        return cls(released=tuple((i, j.queue) for i, j in zip(ids, jobs, strict=True)
                                  if j.run_at is None and j.delay <= 0))

    @classmethod
    def from_json(cls, text: str | None) -> FlowsEnded | None:
        """From PostgreSQL's jobs_ended answer (migration 0017); None for none."""
        if not text:
            return None
        d = json.loads(text)
        done = cls(tuple(int(i) for i in d.get("workflows", ())), tuple(int(i) for i in d.get("batches", ())),
                   tuple((int(i), str(q)) for i, q in d.get("released", ())))
        return done or None


FlowListener = Callable[[FlowsEnded], object]


_NOT_HERE = ("workflows need a direct connection to tether's database (a postgresql:// or sqlite:/// URL); "
             "this app's store is {backend}, and a tether server has no workflow endpoints yet")


class Workflows:
    """The workflow operations of ``Store``; the defaults refuse."""

    backend: str

    def add_flow_listener(self, listener: FlowListener) -> None:
        """Call ``listener`` with what each committed ending of this store's did
        for workflows and batches (``FlowsEnded``), on the thread that ran it."""
        self.__dict__["_flow_listeners"] = (*self.__dict__.get("_flow_listeners", ()), listener)

    def flows_ended(self, done: FlowsEnded | None) -> None:
        """An ending committed and did ``done``: tell the listeners (one that
        raises is logged: the ending stands whatever they do)."""
        if not done:
            return
        for listener in self.__dict__.get("_flow_listeners", ()):
            try:
                listener(done)
            except Exception:
                log.exception("a flow listener raised on %s; ignored", done)

    def flow_answer(self, rows: list[Any]) -> list[Any]:
        """An ending statement's rows without their last column, what
        PostgreSQL's jobs_ended said (the same in every row), which goes to
        ``flows_ended``: the statement has committed (autocommit)."""
        said = next((r[-1] for r in rows if r[-1] is not None), None)
        if said is not None:
            self.flows_ended(FlowsEnded.from_json(said))
        return [r[:-1] for r in rows]

    def enqueue_workflow(self, flow: NewWorkflow, *, conn: object = None) -> tuple[int, list[int]]:
        """Insert the workflow and all its steps in one transaction (tether's own,
        or, given ``conn``, the caller's, without committing); (run id, job ids)."""
        raise ConfigError(_NOT_HERE.format(backend=self.backend))

    async def enqueue_workflow_async(self, flow: NewWorkflow, *, conn: object = None) -> tuple[int, list[int]]:
        raise ConfigError(_NOT_HERE.format(backend=self.backend))

    def get_workflow(self, run_id: int) -> WorkflowInfo | None:
        raise ConfigError(_NOT_HERE.format(backend=self.backend))

    def job_workflow(self, job_id: int) -> int | None:
        """The workflow run a job is a step of (None: an ordinary job)."""
        return None

    def upstream_results(self, job_id: int) -> dict[str, tuple[JobState, str | None]]:
        """{step name: (state, result as JSON text)} of a step's direct dependencies."""
        return {}


#: at most this many counter rows per batch (the edge encodes the shard in 4 bits)
BATCH_SHARDS = 16


@dataclass(frozen=True, slots=True)
class NewBatch:
    """A batch as the app hands it to the store: its members and its callbacks."""

    members: Sequence[NewJob]
    on_complete: NewJob | None = None
    on_success: NewJob | None = None

    @property
    def shards(self) -> int:
        return max(1, min(BATCH_SHARDS, len(self.members)))

    @property
    def callbacks(self) -> list[NewJob]:
        return [j for j in (self.on_complete, self.on_success) if j is not None]

    def link_params(self, batch_id: int, members: Sequence[int], callbacks: Sequence[int]) -> dict[str, Any]:
        it = iter(callbacks)
        on_complete = next(it) if self.on_complete is not None else None
        on_success = next(it) if self.on_success is not None else None
        return {"batch": batch_id, "shards": self.shards, "members": list(members), "callbacks": list(callbacks),
                "on_complete": on_complete, "on_success": on_success}


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """``app.get_batch(id)``: its members' counts by state and its callbacks' job ids."""

    id: int
    created_at: datetime
    counts: dict[JobState, int]
    on_complete: int | None
    on_success: int | None
    finished_at: datetime | None

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def finished(self) -> bool:
        """Every member has ended (the callbacks were released then)."""
        return self.finished_at is not None


def batch_edge(batch_id: int, shard: int) -> int:
    """The job_deps job_id that marks a member of ``batch_id`` in ``shard``."""
    return -(batch_id * BATCH_SHARDS + shard)


class Batches:
    """The batch operations of ``Store``; the defaults refuse."""

    backend: str

    def enqueue_batch(self, batch: NewBatch, *, conn: object = None) -> tuple[int, list[int], list[int]]:
        """Insert the batch, its members and its callbacks in one transaction;
        (batch id, member ids, callback ids)."""
        raise ConfigError(_NOT_HERE.format(backend=self.backend).replace("workflows", "batches"))

    def batch_add(self, member_id: int, jobs: Sequence[NewJob]) -> list[int]:
        """Members added by a running member of a batch (``ctx.batch.add``), in
        one transaction; refused once the batch may have completed."""
        raise ConfigError(_NOT_HERE.format(backend=self.backend).replace("workflows", "batches"))

    def get_batch(self, batch_id: int) -> BatchInfo | None:
        raise ConfigError(_NOT_HERE.format(backend=self.backend).replace("workflows", "batches"))

    def batch_members(self, batch_id: int, *, after: int, limit: int) -> list[int]:
        """A page of the batch's member job ids, ascending, those above ``after``
        (keyset paging: ``ctx.batch.member_ids``)."""
        raise ConfigError(_NOT_HERE.format(backend=self.backend).replace("workflows", "batches"))

    def job_batch(self, job_id: int, *, callback: bool = False) -> int | None:
        """The batch a job is a member of (with ``callback``: or a callback of; None: none)."""
        return None

    def job_flow(self, job_id: int) -> tuple[int | None, int | None]:
        """(the workflow run a job is a step of, the batch it is a member or a
        callback of), in one query (a job's page in the dashboard); Nones: neither."""
        return None, None


def flow_of_row(row: Sequence[Any]) -> tuple[int | None, int | None]:
    """``job_flow``'s answer from its query's row: (run, member's batch edge, callback's batch)."""
    run, edge, called = row
    if edge is not None:
        called = int(edge) // BATCH_SHARDS
    return None if run is None else int(run), None if called is None else int(called)


class FlowLookups:
    """``job_flow`` and ``job_batch`` for a store whose queries.sql holds
    ``job_flow``, ``batch_of`` and ``batch_called`` (both backends' do): a mixin
    of their workflow mixins, which provide ``_all``."""

    def _all(self, name: str, params: dict[str, Any] | None = None) -> list[Any]:
        raise NotImplementedError

    def job_flow(self, job_id: int) -> tuple[int | None, int | None]:
        return flow_of_row(self._all("job_flow", {"id": job_id})[0])

    def job_batch(self, job_id: int, *, callback: bool = False) -> int | None:
        rows = self._all("batch_of", {"id": job_id})
        if rows:
            return int(rows[0][0]) // BATCH_SHARDS
        called = self._all("batch_called", {"id": job_id}) if callback else []
        return int(called[0][0]) if called else None
