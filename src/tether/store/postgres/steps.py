"""The PostgreSQL store's operations as the statements they need, without I/O.

An operation here is a generator (``Steps``): it yields (query name,
params), is sent each statement's rows, and returns its answer. The store
runs one on its pool (``PostgresStore._drive``) or on the running event loop's
own connections (``_drive_async``), so the sync and async paths send the same
statements, with the same retries, chunks and lookups.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any, TypeVar

from ...model import Beat, ClaimedJob, JobId, NewJob
from ..columns import pg_arrays, pg_params
from ..rows import assign_ids, claimed_from_rows, inserted_ids, missing_keys

__all__ = [
    "DONE_CHUNK",
    "Rows",
    "Steps",
    "beats",
    "claim_ids_steps",
    "claim_steps",
    "complete_and_claim_ids_steps",
    "complete_and_claim_steps",
    "complete_steps",
    "enqueue_steps",
]

Rows = list[tuple[Any, ...]]
T = TypeVar("T")
#: An operation as the statements it needs, without any I/O, so that the sync
#: and the async paths run the same plan (and retries, chunks, lookups): it
#: yields (query name, params), is sent each statement's rows, and returns
#: its answer. ``_drive`` and ``_drive_async`` run one.
Steps = Generator[tuple[str, dict[str, Any]], Rows, T]

#: at most this many successes per statement (a reporter's batch after an
#: outage can be thousands), so that no one statement is unbounded
DONE_CHUNK = 200


def enqueue_steps(jobs: Sequence[NewJob], now: datetime | None) -> Steps[list[JobId]]:
    """The insert, and for dedup hits the lookup of the jobs holding their
    keys (active, or inside their dedup window; dedup_holders releases the
    windows that have passed). Each statement commits on its own: when a
    key's holder finished (or its window was released) between the insert and
    the lookup, only the jobs still without an id are inserted again (the rest
    are in, and inserting them again would make them twice)."""
    if not jobs:
        return []
    ids: list[JobId | None] = [None] * len(jobs)
    pending = list(range(len(jobs)))
    for _ in range(3):
        batch = [jobs[i] for i in pending]
        query, params = _enqueue_plan(batch, now)
        # Ids follow the ORDER BY of the insert's SELECT; RETURNING's own
        # order is unspecified, so sort by id to get the input order back.
        rows = sorted((yield query, params))
        if len(rows) == len(batch) and len(batch) == len(jobs):  # the plain case: all in, at the first try
            return inserted_ids(rows)
        if len(rows) == len(batch):
            got: list[JobId | None] = list(inserted_ids(rows))
        else:
            keys = missing_keys(batch, rows)
            held = {k: i for i, k in (yield "dedup_holders", {"keys": keys, "now": now})} if keys else {}
            got = assign_ids(batch, rows, held)
        for i, job_id in zip(pending, got, strict=True):
            ids[i] = job_id
        pending = [i for i in pending if ids[i] is None]
        if not pending:
            return [i for i in ids if i is not None]
        # The job holding a key finished between our insert and our lookup:
        # its key is free now, so the next try inserts the jobs that wanted it.
    raise RuntimeError("enqueue: dedup key kept changing hands; try again")


def _enqueue_plan(jobs: Sequence[NewJob], now: datetime | None) -> tuple[str, dict[str, Any]]:
    """The insert for these jobs: one job, many sharing their options, or any
    mix. The parameters of the columns a NewJob fills come from store/columns.py."""
    if len(jobs) == 1:
        (j,) = jobs
        return "enqueue_one", {"now": now, "run_at": j.run_at, "delay": j.delay, **pg_params(j)}
    if _uniform(jobs):
        j = jobs[0]
        return "enqueue_uniform", {"now": now, "run_at": j.run_at, "delay": j.delay, **pg_params(j),
                                   "args": "[" + ",".join(x.args_json for x in jobs) + "]"}
    return "enqueue", {"now": now, "run_at": [j.run_at for j in jobs], "delay": [j.delay for j in jobs],
                       **pg_arrays(jobs)}


#: every field of a NewJob but its args (derived, so a new field cannot be missed)
_options = attrgetter(*(f for f in NewJob.__dataclass_fields__ if f != "args_json"))


def _uniform(jobs: Sequence[NewJob]) -> bool:
    """Whether these jobs differ only in their args, and none has a dedup key."""
    first = _options(jobs[0])
    return jobs[0].dedup_key is None and all(_options(j) == first for j in jobs[1:])


def claim_steps(
    worker: str, queues: Sequence[str], limit: int, lease_ttl: float, now: datetime | None,
    tasks: Sequence[str] | None = None,
) -> Steps[list[ClaimedJob]]:
    rows = yield _claim_query("claim", tasks), {
        "worker": worker, "queues": list(queues), "limit": limit, "lease_ttl": lease_ttl, "now": now,
        "done": None, **_tasks_param(tasks)}
    return claimed_from_rows(rows)


def _claim_query(name: str, tasks: Sequence[str] | None) -> str:
    """The query that claims any task (tools, tests) or, given a worker's tasks, only those."""
    return name if tasks is None else f"{name}_known"


def _tasks_param(tasks: Sequence[str] | None) -> dict[str, Any]:
    return {} if tasks is None else {"tasks": list(tasks)}


def complete_steps(
    worker: str, done: Sequence[tuple[int, int, str | None]], now: datetime | None
) -> Steps[set[int]]:
    """Chunked: the fence reads each row's attempt by array_position, a
    linear search (see _fenced_success); one chunk is at most a claim batch."""
    accepted: set[int] = set()
    for start in range(0, len(done), DONE_CHUNK):
        rows = yield "complete", {**_done_params(worker, done[start:start + DONE_CHUNK]), "now": now}
        accepted.update(r[0] for r in rows)
    return accepted


def complete_and_claim_steps(
    worker: str, done: Sequence[tuple[int, int, str | None]], queues: Sequence[str], limit: int,
    lease_ttl: float, now: datetime | None, tasks: Sequence[str] | None = None,
) -> Steps[tuple[set[int], list[ClaimedJob]]]:
    """One statement; none to carry, or more successes than one statement
    takes (see complete_steps): complete's statements, then claim's."""
    if not done or len(done) > DONE_CHUNK:
        accepted = yield from complete_steps(worker, done, now)
        return accepted, (yield from claim_steps(worker, queues, limit, lease_ttl, now, tasks))
    rows = yield _claim_query("complete_and_claim", tasks), {
        **_done_params(worker, done), "queues": list(queues), "limit": limit, "lease_ttl": lease_ttl, "now": now,
        **_tasks_param(tasks),
    }
    return {r[1] for r in rows if r[0] == 1}, claimed_from_rows([r[1:] for r in rows if r[0] == 0])


def claim_ids_steps(
    worker: str, ids: Sequence[int], queues: Sequence[str], lease_ttl: float, now: datetime | None,
    tasks: Sequence[str] | None,
) -> Steps[list[ClaimedJob]]:
    if not ids:
        return []
    rows = yield "claim_ids", {**_ids_params(worker, ids, queues, lease_ttl, now, tasks), "done": None}
    return claimed_from_rows(rows)


def complete_and_claim_ids_steps(
    worker: str, done: Sequence[tuple[int, int, str | None]], ids: Sequence[int], queues: Sequence[str],
    lease_ttl: float, now: datetime | None, tasks: Sequence[str] | None,
) -> Steps[tuple[set[int], list[ClaimedJob]]]:
    """One statement; one side empty, or more successes than one statement
    takes (see complete_steps): complete's statements, then claim_ids'."""
    if not done or not ids or len(done) > DONE_CHUNK:
        accepted = yield from complete_steps(worker, done, now)
        return accepted, (yield from claim_ids_steps(worker, ids, queues, lease_ttl, now, tasks))
    rows = yield "complete_and_claim_ids", {
        **_ids_params(worker, ids, queues, lease_ttl, now, tasks), **_done_params(worker, done)}
    return {r[1] for r in rows if r[0] == 1}, claimed_from_rows([r[1:] for r in rows if r[0] == 0])


def _ids_params(worker: str, ids: Sequence[int], queues: Sequence[str], lease_ttl: float, now: datetime | None,
                tasks: Sequence[str] | None) -> dict[str, Any]:
    """claim_ids' params but ``done``: the delivered ids as an array literal
    (as _done_params sends its ids), int() each so nothing else gets in."""
    return {"worker": worker, "delivered": "{" + ",".join([str(int(i)) for i in ids]) + "}",
            "queues": list(queues), "lease_ttl": lease_ttl, "now": now, "tasks": None if tasks is None else list(tasks)}


def _done_params(worker: str, done: Sequence[tuple[int, int, str | None]]) -> dict[str, Any]:
    """complete's rows as _fenced_success reads them: the ids, and one JSON
    object of {"<id>": [attempt] or [attempt, result]}. A result is already
    JSON text (dump_json made it), so it goes in as it is, not parsed again."""
    return {
        "worker": worker,
        # an array literal: psycopg's list dumper runs Python code per element
        "ids": "{" + ",".join([str(d[0]) for d in done]) + "}",
        "done": "{" + ",".join(f'"{i}":[{a}]' if r is None else f'"{i}":[{a},{r}]' for i, a, r in done) + "}",
    }


def beats(held: Sequence[tuple[int, int]], rows: list[tuple[Any, ...]]) -> dict[int, Beat]:
    renewed = {r[0]: bool(r[1]) for r in rows}
    return {
        job_id: (Beat.LOST if job_id not in renewed else Beat.CANCEL_REQUESTED if renewed[job_id] else Beat.RENEWED)
        for job_id, _ in held
    }

