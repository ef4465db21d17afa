"""Workflows on PostgreSQL (issue 42): a mixin of ``PostgresStore``, in a module
of its own. The enqueue is a few statements in one transaction (tether's own,
or the caller's with ``conn=``); the release of waiting steps is no method
here: every ending does it (queries.sql's ``_ending``, migration 0012)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from ...model import JobState
from ..flows import NewWorkflow, StepInfo, WorkflowInfo
from .steps import Steps, _enqueue_plan

__all__ = ["PostgresWorkflows", "workflow_steps"]


def workflow_steps(flow: NewWorkflow) -> Steps[tuple[int, list[int]]]:
    """The run's row, its jobs (inserted as any enqueue inserts them), then
    the steps, edges and counts with the waiting jobs moved to 'waiting'."""
    (run_id,), = yield "workflow_insert", {"name": flow.name, "now": None}
    query, params = _enqueue_plan(flow.jobs, None)
    ids = [r[0] for r in sorted((yield query, params))]  # ids rise with the insert's order
    yield "workflow_link", flow.link_params(run_id, ids)
    return run_id, ids


class PostgresWorkflows:
    """For ``PostgresStore`` (which provides the pool, the queries and ``_tx``)."""

    pool: Any
    q: dict[str, str]
    _tx: Any

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
