"""Workflows on PostgreSQL (issue 42): a mixin of ``PostgresStore``, in a module
of its own. The enqueue is a few statements in one transaction (tether's own,
or the caller's with ``conn=``); the release of waiting steps is no method
here: every ending does it (queries.sql's ``_ending``, migration 0012)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from ...errors import InvalidTransition
from ...model import JobState, NewJob
from ..flows import BATCH_SHARDS, BatchInfo, FlowLookups, FlowsEnded, NewBatch, NewWorkflow, StepInfo, WorkflowInfo
from .steps import Steps, _enqueue_plan

__all__ = ["FLOW_ANSWERS", "PostgresWorkflows", "batch_steps", "workflow_steps"]

#: the ending statements whose answer's last column is what jobs_ended said
#: (queries.sql, _ended; migration 0017): ``PostgresStore._all`` hands it to ``flows_ended``
FLOW_ANSWERS = frozenset({"complete", "complete_and_claim", "complete_and_claim_known", "complete_and_claim_ids",
                          "fail", "release", "reap", "cancel", "bury_unknown", "expire", "cancel_many"})


def workflow_steps(flow: NewWorkflow) -> Steps[tuple[int, list[int]]]:
    """The run's row, its jobs (inserted as any enqueue inserts them), then
    the steps, edges and counts with the waiting jobs moved to 'waiting'."""
    (run_id,), = yield "workflow_insert", {"name": flow.name, "now": None}
    query, params = _enqueue_plan(flow.jobs, None)
    ids = [r[0] for r in sorted((yield query, params))]  # ids rise with the insert's order
    yield "workflow_link", flow.link_params(run_id, ids)
    return run_id, ids


def _insert(jobs: Sequence[NewJob]) -> Steps[list[int]]:
    if not jobs:
        return []
    query, params = _enqueue_plan(jobs, None)
    return [r[0] for r in sorted((yield query, params))]


def batch_steps(batch: NewBatch) -> Steps[tuple[int, list[int], list[int]]]:
    """The batch's row, its members and callbacks, then the edges, the shards'
    counts and the callbacks held waiting."""
    (batch_id,), = yield "batch_insert", {"shards": batch.shards, "now": None}
    members = yield from _insert(batch.members)
    callbacks = yield from _insert(batch.callbacks)
    yield "batch_link", batch.link_params(batch_id, members, callbacks)
    return batch_id, members, callbacks


def grow_steps(member_id: int, jobs: Sequence[NewJob]) -> Steps[list[int]]:
    """ctx.batch.add: the adding member's shard counts the new ones first
    (refused at zero), then they are inserted with its batch's edge."""
    found = yield "batch_of", {"id": member_id}
    if not found:
        raise InvalidTransition(f"job {member_id} is no member of a batch: ctx.batch.add needs one")
    edge = int(found[0][0])
    batch_id, shard = divmod(edge, BATCH_SHARDS)
    if not (yield "batch_grow", {"batch": batch_id, "shard": shard, "n": len(jobs)}):
        raise InvalidTransition(f"batch {batch_id} may have completed already: no member can be added to it")
    ids = yield from _insert(jobs)
    yield "batch_join", {"edge": -edge, "members": ids}
    return ids


class PostgresWorkflows(FlowLookups):
    """For ``PostgresStore`` (which provides the pool, the queries and ``_tx``)."""

    pool: Any
    q: dict[str, str]
    _tx: Any
    #: ``Workflows.flows_ended`` (an annotation: the store's own method)
    flows_ended: Callable[[FlowsEnded | None], None]

    def _all(self, name: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def enqueue_workflow(self, flow: NewWorkflow, *, conn: object = None) -> tuple[int, list[int]]:
        if conn is not None:
            self._tx.check(conn, want_async=False)
            assert isinstance(conn, psycopg.Connection)
            result: tuple[int, list[int]] = self._tx.enqueue_on(conn, workflow_steps(flow))
            return result
        with self.pool.connection() as own, own.transaction():
            result = self._tx.enqueue_on(own, workflow_steps(flow))
            return result

    async def enqueue_workflow_async(self, flow: NewWorkflow, *, conn: object = None) -> tuple[int, list[int]]:
        if isinstance(conn, psycopg.AsyncConnection):
            self._tx.check(conn, want_async=True)
            result: tuple[int, list[int]] = await self._tx.enqueue_on_async(conn, workflow_steps(flow))
            return result
        if conn is not None:
            return self.enqueue_workflow(flow, conn=conn)
        return await asyncio.to_thread(self.enqueue_workflow, flow)

    def get_workflow(self, run_id: int) -> WorkflowInfo | None:
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            head = conn.execute(self.q["workflow_get"], {"id": run_id}).fetchall()
            rows = conn.execute(self.q["workflow_steps"], {"id": run_id}).fetchall() if head else []
        if not head:
            return None
        steps = [StepInfo(name, job_id, None if state is None else JobState(state), tuple(after), policy)
                 for name, job_id, state, policy, after in rows]
        return WorkflowInfo(head[0][0], head[0][1], head[0][2], steps)

    def job_workflow(self, job_id: int) -> int | None:
        rows = self._all("job_workflow", {"id": job_id})
        return int(rows[0][0]) if rows else None

    def upstream_results(self, job_id: int) -> dict[str, tuple[JobState, str | None]]:
        return {name: (JobState(state), result) for name, state, result in self._all("upstream_results", {"id": job_id})}

    # -- batches ----------------------------------------------------------------------------
    def enqueue_batch(self, batch: NewBatch, *, conn: object = None) -> tuple[int, list[int], list[int]]:
        if conn is not None:
            self._tx.check(conn, want_async=False)
            assert isinstance(conn, psycopg.Connection)
            result: tuple[int, list[int], list[int]] = self._tx.enqueue_on(conn, batch_steps(batch))
            return result
        with self.pool.connection() as own, own.transaction():
            result = self._tx.enqueue_on(own, batch_steps(batch))
            return result

    def batch_add(self, member_id: int, jobs: Sequence[NewJob]) -> list[int]:
        with self.pool.connection() as own, own.transaction():
            ids: list[int] = self._tx.enqueue_on(own, grow_steps(member_id, jobs))
        self.flows_ended(FlowsEnded.added(jobs, ids))  # committed: a delivering transport publishes them
        return ids

    def get_batch(self, batch_id: int) -> BatchInfo | None:
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            head = conn.execute(self.q["batch_get"], {"id": batch_id}).fetchall()
            counts = conn.execute(self.q["batch_counts"], {"id": batch_id}).fetchall() if head else []
        if not head:
            return None
        bid, created, on_complete, on_success, finished = head[0]
        return BatchInfo(bid, created, {JobState(s): int(n) for s, n in counts}, on_complete, on_success, finished)

    def batch_members(self, batch_id: int, *, after: int, limit: int) -> list[int]:
        return [int(r[0]) for r in self._all("batch_members", {"id": batch_id, "after": after, "limit": limit})]
