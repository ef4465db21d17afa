"""Workflows on SQLite (issue 42): a mixin of ``SQLiteStore``, in a module of
its own. The enqueue runs in one write transaction (tether's own, or the
caller's with ``conn=``); the release of waiting steps is no method here:
every ending does it (ending.py)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from ...errors import InvalidTransition
from ...model import JobId, JobState, NewJob
from ..flows import (
    BATCH_SHARDS,
    BatchInfo,
    FlowLookups,
    FlowsEnded,
    NewBatch,
    NewWorkflow,
    StepInfo,
    WorkflowInfo,
    batch_edge,
)
from ..rows import epoch_to_dt

__all__ = ["SQLiteWorkflows"]


class SQLiteWorkflows(FlowLookups):
    """For ``SQLiteStore`` (which provides the queries, ``_write``, ``_enqueue_in`` and ``_tx``)."""

    q: dict[str, str]
    _tx: Any
    #: ``Workflows.flows_ended`` (an annotation: the store's own method)
    flows_ended: Callable[[FlowsEnded | None], None]

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _all(self, name: str, params: dict[str, Any] | None = None) -> list[Any]:
        raise NotImplementedError

    def _enqueue_in(self, conn: sqlite3.Connection | sqlite3.Cursor, jobs: list[NewJob], now: Any) -> list[JobId]:
        raise NotImplementedError

    def _workflow_in(self, conn: sqlite3.Connection | sqlite3.Cursor, flow: NewWorkflow) -> tuple[int, list[int]]:
        (run_id,), = conn.execute(self.q["workflow_insert"], {"name": flow.name, "now": None}).fetchall()
        ids = [int(i) for i in self._enqueue_in(conn, list(flow.jobs), None)]
        p = flow.link_params(run_id, ids)
        conn.executemany(self.q["workflow_step"], [{"job": j, "workflow": run_id, "name": n}
                                                   for j, n in zip(p["jobs"], p["names"], strict=True)])
        conn.executemany(self.q["workflow_dep"], [{"up": u, "down": d} for u, d in zip(p["ups"], p["downs"], strict=True)]
                         + [{"up": j, "down": 0} for j in ids])  # each step's edge to no job (migration 0015)
        conn.execute(self.q["workflow_open"], {"id": run_id, "n": len(ids)})
        waits = list(zip(p["waiting"], p["pending"], p["policies"], strict=True))
        conn.executemany(self.q["workflow_wait"], [{"job": j, "pending": n, "policy": o} for j, n, o in waits])
        conn.executemany(self.q["workflow_hold"], [{"job": j} for j, _, _ in waits])
        return int(run_id), ids

    def enqueue_workflow(self, flow: NewWorkflow, *, conn: object = None) -> tuple[int, list[int]]:
        if conn is not None:
            result: tuple[int, list[int]] = self._tx.run(self._tx.check(conn), lambda cur: self._workflow_in(cur, flow))
            return result
        with self._write() as own:
            return self._workflow_in(own, flow)

    async def enqueue_workflow_async(self, flow: NewWorkflow, *, conn: object = None) -> tuple[int, list[int]]:
        # sqlite3 has no async driver; the write is short and local
        return self.enqueue_workflow(flow, conn=conn)

    def get_workflow(self, run_id: int) -> WorkflowInfo | None:
        head = self._all("workflow_get", {"id": run_id})
        if not head:
            return None
        steps = [StepInfo(name, job_id, None if state is None else JobState(state), tuple(json.loads(after)), policy)
                 for name, job_id, state, policy, after in self._all("workflow_steps", {"id": run_id})]
        created = epoch_to_dt(head[0][2])
        assert created is not None
        return WorkflowInfo(head[0][0], head[0][1], created, steps)

    def job_workflow(self, job_id: int) -> int | None:
        rows = self._all("job_workflow", {"id": job_id})
        return int(rows[0][0]) if rows else None

    def upstream_results(self, job_id: int) -> dict[str, tuple[JobState, str | None]]:
        return {name: (JobState(state), result) for name, state, result in self._all("upstream_results", {"id": job_id})}

    # -- batches ----------------------------------------------------------------------------
    def _batch_in(self, conn: sqlite3.Connection | sqlite3.Cursor, batch: NewBatch) -> tuple[int, list[int], list[int]]:
        (batch_id,), = conn.execute(self.q["batch_insert"], {"shards": batch.shards, "now": None}).fetchall()
        members = [int(i) for i in self._enqueue_in(conn, list(batch.members), None)]
        callbacks = [int(i) for i in self._enqueue_in(conn, batch.callbacks, None)] if batch.callbacks else []
        p = batch.link_params(batch_id, members, callbacks)
        shards = [i % batch.shards for i in range(len(members))]
        conn.executemany(self.q["workflow_dep"], [{"up": m, "down": batch_edge(batch_id, k)}
                                                  for m, k in zip(members, shards, strict=True)])
        conn.executemany(self.q["batch_shard"], [{"batch": batch_id, "shard": k, "pending": shards.count(k)}
                                                 for k in range(batch.shards)])
        conn.executemany(self.q["workflow_hold"], [{"job": j} for j in callbacks])
        conn.execute(self.q["batch_callbacks"], p)
        return int(batch_id), members, callbacks

    def enqueue_batch(self, batch: NewBatch, *, conn: object = None) -> tuple[int, list[int], list[int]]:
        if conn is not None:
            result: tuple[int, list[int], list[int]] = self._tx.run(self._tx.check(conn),
                                                                    lambda cur: self._batch_in(cur, batch))
            return result
        with self._write() as own:
            return self._batch_in(own, batch)

    def batch_add(self, member_id: int, jobs: Sequence[NewJob]) -> list[int]:
        with self._write() as conn:
            found = conn.execute(self.q["batch_of"], {"id": member_id}).fetchall()
            if not found:
                raise InvalidTransition(f"job {member_id} is no member of a batch: ctx.batch.add needs one")
            edge = int(found[0][0])
            batch_id, shard = divmod(edge, BATCH_SHARDS)
            grown = conn.execute(self.q["batch_grow"], {"batch": batch_id, "shard": shard, "n": len(jobs)}).fetchall()
            if not grown:
                raise InvalidTransition(f"batch {batch_id} may have completed already: no member can be added to it")
            ids = self._enqueue_in(conn, list(jobs), None)
            conn.executemany(self.q["workflow_dep"], [{"up": i, "down": -edge} for i in ids])
        added = [int(i) for i in ids]
        self.flows_ended(FlowsEnded.added(jobs, added))  # committed: a delivering transport publishes them
        return added

    def get_batch(self, batch_id: int) -> BatchInfo | None:
        head = self._all("batch_get", {"id": batch_id})
        if not head:
            return None
        counts = {JobState(s): int(n) for s, n in self._all("batch_counts", {"id": batch_id})}
        bid, created, on_complete, on_success, finished = head[0]
        created_at = epoch_to_dt(created)
        assert created_at is not None
        return BatchInfo(bid, created_at, counts, on_complete, on_success, epoch_to_dt(finished))

    def batch_members(self, batch_id: int, *, after: int, limit: int) -> list[int]:
        return [int(r[0]) for r in self._all("batch_members", {"id": batch_id, "after": after, "limit": limit})]
