"""The Store interface over a tether server's HTTP API (``http://host:port``).

Standard library only (``client``: ``http.client`` from threads; a worker's
rounds from its event loop, ``aio``). Errors come back as the same exceptions a local
store raises (``StaleAttempt`` for a refused fenced write, ``JobNotFound``,
...); a server that cannot be reached, times out or fails raises
``ServerUnavailable``, which the worker runtime treats like an unreachable
database: it retries, and fences itself off a job once the lease's local
deadline passes.

Requests are never retried here: a request whose answer was lost may have
taken effect (an enqueue would be duplicated), so the caller decides.

A worker's round (successes to record, then the next claim) is one request,
``complete_and_claim``; against a server older than that operation the store
falls back to two, ``complete`` then ``claim``, and says so once in the log.
A worker awaits its rounds (``claim_async``, ``complete_async``,
``complete_and_claim_async``, ``claim_ids_async``) on its event loop: over
http the loop sends them itself, no thread hop, as the PostgreSQL store does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from datetime import datetime
from typing import Any

from ... import model
from ...config import DatabaseURL, check_limits, validate_queue
from ...errors import ConfigError, NotYourWorker
from ...key_patterns import check_key_limits
from ...model import (
    Attempt,
    Beat,
    ClaimedJob,
    DueJob,
    FiredTick,
    Job,
    JobId,
    JobState,
    KeyLimits,
    NewJob,
    Outcome,
    QueueLimits,
    Reaped,
    ScheduleInfo,
    ScheduleSpec,
    Stats,
    WorkerInfo,
    job_id,
)
from ...naming import check_worker_identity
from ..base import Store, check_prune
from ..buckets import Buckets, check_sizes
from ..schedules import TaskTags, dynamic_spec, tagged
from ..worker_rows import WORKERS_PAGE
from . import wire, wire_schedules, wire_unknown
from .client import HttpClient, UnknownOperation, done_rows, tasks_field
from .flows import HttpFlows
from .many import HttpMany

__all__ = ["HttpStore"]

log = logging.getLogger("tether.store.http")

class HttpStore(HttpClient, HttpFlows, HttpMany, Store):
    backend = "http"
    default_poll_interval = 0.05  # claims long-poll on the server; this is only the gap between them
    # Each round is a request to the server, which pays for it about as much
    # again as the database does: fewer, larger rounds. Remote scenario, 1 x 10
    # no-op jobs: 4 batches ahead instead of 2 took remote/local from 0.54 to
    # 0.62-0.75 (PostgreSQL, two sessions); 8 instead of 4 (interleaved,
    # 2026-11-27) 6,648-7,776 -> 8,602-10,250 jobs/s on PostgreSQL and
    # 12,447-12,597 -> 15,152-17,870 on SQLite, for less worker and server CPU
    # per job. Only for quick handlers: Executor.ahead (PREFETCH_DRAIN).
    prefetch_factor = 8
    always_carry = True
    # A round is a request: the worker encodes, the server decodes and encodes,
    # the database runs the statement, each in turn. With claims in flight the
    # server and the database work on one while another is on its way. Three
    # rather than two (remote scenario, 2026-11-27, with the lease bound that
    # counts successes riding on claims): 1 x 50 from 25,573 to 33,296 jobs/s
    # on PostgreSQL (remote/local 0.67 -> 0.79), 36,494 to 46,643 on SQLite.
    claims_in_flight = 3

    def __init__(self, dsn: DatabaseURL, *, token: str | None = None) -> None:
        super().__init__(dsn, token=token)
        #: False once the server turned out to predate the complete_and_claim operation
        self._combined = True

    # -- schema ---------------------------------------------------------------------------
    def migrate(self) -> list[str]:
        return list(self._call("migrate")["applied"])

    def check_schema(self) -> None:
        self._call("check_schema")

    def schema_objects(self) -> dict[str, list[str]]:
        return dict(self._call("schema_objects")["objects"])

    # -- producers ------------------------------------------------------------------------
    def enqueue(self, jobs: Sequence[NewJob], *, now: datetime | None = None) -> list[JobId]:
        if not jobs:
            return []
        found = self._call("enqueue", {"jobs": [wire.encode_new_job(j) for j in jobs]}, now=now)
        duplicates = set(found.get("duplicates", ()))
        return [job_id(i, k in duplicates) for k, i in enumerate(found["ids"])]

    def get_job(self, job_id: int) -> Job | None:
        try:
            return wire.decode_job(self._call("get_job", path={"job_id": job_id}))
        except LookupError:
            return None

    def list_jobs(
        self, *, state: str | None = None, queue: str | None = None, task: str | None = None, limit: int = 50
    ) -> list[Job]:
        found = self._call("list_jobs", query={"state": state, "queue": queue, "task": task, "limit": limit})
        return [wire.decode_job(j) for j in found["jobs"]]

    def cancel(self, job_id: int, *, now: datetime | None = None) -> JobState:
        return JobState(self._call("cancel", {}, path={"job_id": job_id}, now=now)["state"])

    def retry(self, job_id: int, *, now: datetime | None = None) -> str:
        return str(self._call("retry", {}, path={"job_id": job_id}, now=now)["queue"])

    def recent_attempts(self, outcomes: Sequence[Outcome], *, limit: int = 50) -> list[Attempt]:
        found = self._call("recent_attempts", query={"outcomes": ",".join(str(o) for o in outcomes), "limit": limit})
        return [wire.decode_attempt(a) for a in found["attempts"]]

    def throughput(self, *, buckets: int, bucket_seconds: int, now: datetime | None = None) -> Buckets:
        check_sizes(buckets, bucket_seconds)  # the error a local store raises, not the server's 400
        query = {"buckets": buckets, "bucket_seconds": bucket_seconds,
                 "now": None if now is None else now.isoformat()}
        return [wire.decode_throughput(t) for t in self._call("throughput", query=query)["buckets"]]

    def stats(self) -> Stats:
        return wire.decode_stats(self._call("stats"))

    # -- workers ----------------------------------------------------------------------------
    def _claim_wait(self, lease_ttl: float, now: datetime | None) -> float:
        # A claim held on the server must return well inside the lease: the
        # worker's local deadline counts from when the request was sent.
        return 0.0 if now is not None else min(self.claim_wait, lease_ttl / 4)

    def _claim_body(self, worker: str, queues: Sequence[str], limit: int, lease_ttl: float, now: datetime | None,
                    tasks: Sequence[str] | None) -> tuple[dict[str, Any], float]:
        """A claim's body, and the request's timeout (the wait on top of the usual)."""
        wait = self._claim_wait(lease_ttl, now)
        return ({"worker": worker, "queues": list(queues), "limit": limit, "lease_ttl": lease_ttl, "wait": wait,
                 **tasks_field(tasks)}, self.timeout + wait)

    def claim(
        self, worker: str, queues: Sequence[str], limit: int, lease_ttl: float, *, now: datetime | None = None,
        tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        body, timeout = self._claim_body(worker, queues, limit, lease_ttl, now, tasks)
        return _jobs(self._call("claim", body, now=now, timeout=timeout))

    def complete_and_claim(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], queues: Sequence[str], limit: int,
        lease_ttl: float, *, now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        if not done:
            return set(), self.claim(worker, queues, limit, lease_ttl, now=now, tasks=tasks)
        if self._combined:
            body, timeout = self._claim_body(worker, queues, limit, lease_ttl, now, tasks)
            body["done"] = done_rows(done)
            try:
                found = self._call("complete_and_claim", body, now=now, timeout=timeout)
            except UnknownOperation:
                self._not_combined()
            else:
                return set(found["accepted"]), _jobs(found)
        return super().complete_and_claim(worker, done, queues, limit, lease_ttl, now=now, tasks=tasks)

    def _not_combined(self) -> None:
        # The server answered that it has no such route, so nothing was
        # written: the same round in two requests, now and from now on.
        self._combined = False
        log.warning("tether server %s predates complete_and_claim: each worker round takes two requests "
                    "(complete, then claim) until it is upgraded", self.url)

    def claim_ids(
        self, worker: str, ids: Sequence[int], queues: Sequence[str], lease_ttl: float, *,
        now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        if not ids:
            return []
        body = {"worker": worker, "ids": list(ids), "queues": list(queues), "lease_ttl": lease_ttl,
                **tasks_field(tasks)}
        return _jobs(self._call("claim_ids", body, now=now))

    # -- a worker's round, from its event loop (over https: through the threads) ---------------
    async def claim_async(
        self, worker: str, queues: Sequence[str], limit: int, lease_ttl: float, *,
        executor: Executor | None = None, now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        if self._aio is None:
            return await super().claim_async(worker, queues, limit, lease_ttl, executor=executor, now=now,
                                             tasks=tasks)
        body, timeout = self._claim_body(worker, queues, limit, lease_ttl, now, tasks)
        return _jobs(await self._call_async("claim", body, timeout=timeout, now=now))

    async def complete_async(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], *,
        executor: Executor | None = None, now: datetime | None = None,
    ) -> set[int]:
        if self._aio is None:
            return await super().complete_async(worker, done, executor=executor, now=now)
        if not done:
            return set()
        body = {"worker": worker, "done": done_rows(done)}
        return set((await self._call_async("complete", body, timeout=self.timeout, now=now))["accepted"])

    async def complete_and_claim_async(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], queues: Sequence[str], limit: int,
        lease_ttl: float, *, executor: Executor | None = None, now: datetime | None = None,
        tasks: Sequence[str] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        if self._aio is None:
            return await super().complete_and_claim_async(worker, done, queues, limit, lease_ttl, executor=executor,
                                                          now=now, tasks=tasks)
        if done and self._combined:
            body, timeout = self._claim_body(worker, queues, limit, lease_ttl, now, tasks)
            body["done"] = done_rows(done)
            try:
                found = await self._call_async("complete_and_claim", body, timeout=timeout, now=now)
            except UnknownOperation:
                self._not_combined()
            else:
                return set(found["accepted"]), _jobs(found)
        accepted = await self.complete_async(worker, done, now=now) if done else set()
        return accepted, await self.claim_async(worker, queues, limit, lease_ttl, now=now, tasks=tasks)

    async def claim_ids_async(
        self, worker: str, ids: Sequence[int], queues: Sequence[str], lease_ttl: float, *,
        executor: Executor | None = None, now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        if self._aio is None:
            return await super().claim_ids_async(worker, ids, queues, lease_ttl, executor=executor, now=now,
                                                 tasks=tasks)
        if not ids:
            return []
        body = {"worker": worker, "ids": list(ids), "queues": list(queues), "lease_ttl": lease_ttl,
                **tasks_field(tasks)}
        return _jobs(await self._call_async("claim_ids", body, timeout=self.timeout, now=now))

    async def complete_and_claim_ids_async(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], ids: Sequence[int], queues: Sequence[str],
        lease_ttl: float, *, executor: Executor | None = None, now: datetime | None = None,
        tasks: Sequence[str] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        if self._aio is None:
            return await super().complete_and_claim_ids_async(worker, done, ids, queues, lease_ttl,
                                                              executor=executor, now=now, tasks=tasks)
        accepted = await self.complete_async(worker, done, now=now) if done else set()
        return accepted, await self.claim_ids_async(worker, ids, queues, lease_ttl, now=now, tasks=tasks)

    def due_unclaimed(
        self, queues: Sequence[str], *, grace: float, limit: int, now: datetime | None = None
    ) -> list[DueJob]:
        body = {"queues": list(queues), "grace": grace, "limit": limit}
        return [wire.decode_due(j) for j in self._call("due_unclaimed", body, now=now)["jobs"]]

    def heartbeat(
        self, worker: str, held: Sequence[tuple[int, int]], lease_ttl: float, *, now: datetime | None = None
    ) -> dict[int, Beat]:
        body = {"worker": worker, "held": [{"id": i, "attempt": a} for i, a in held], "lease_ttl": lease_ttl}
        return {b["id"]: Beat(b["beat"]) for b in self._call("heartbeat", body, now=now)["beats"]}

    def progress(
        self, worker: str, job_id: int, attempt: int, fraction: float | None, message: str | None,
        lease_ttl: float, *, now: datetime | None = None,
    ) -> bool:
        body = {"worker": worker, "job_id": job_id, "attempt": attempt, "fraction": fraction, "message": message,
                "lease_ttl": lease_ttl}
        return bool(self._call("progress", body, now=now)["cancel_requested"])

    def complete(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], *, now: datetime | None = None
    ) -> set[int]:
        if not done:
            return set()
        return set(self._call("complete", {"worker": worker, "done": done_rows(done)}, now=now)["accepted"])

    def fail(
        self, worker: str, job_id: int, attempt: int, *, outcome: Outcome, error: str,
        traceback: str | None = None, retry: bool = True, now: datetime | None = None, delay: float | None = None,
    ) -> JobState:
        body = {"worker": worker, "job_id": job_id, "attempt": attempt, "outcome": str(outcome), "error": error,
                "traceback": traceback, "retry": retry}
        if delay is not None:  # only when set: a server from before retry policies refuses the field
            body["delay"] = delay
        return JobState(self._call("fail", body, now=now)["state"])

    def release(self, worker: str, job_id: int, attempt: int, *, now: datetime | None = None) -> JobState:
        body = {"worker": worker, "job_id": job_id, "attempt": attempt}
        return JobState(self._call("release", body, now=now)["state"])

    # -- job control: retention ---------------------------------------------------------------
    def prune(self, ages: Mapping[JobState, float], limit: int, *, now: datetime | None = None) -> dict[JobState, int]:
        body = {"ages": {str(k): v for k, v in check_prune(ages, limit).items()}, "limit": limit}
        return {JobState(k): int(v) for k, v in self._call("prune", body, now=now)["pruned"].items()}

    def prunable(self, ages: Mapping[JobState, float], *, now: datetime | None = None) -> dict[JobState, int]:
        body = {"ages": {str(k): v for k, v in check_prune(ages).items()}}
        return {JobState(k): int(v) for k, v in self._call("prunable", body, now=now)["pruned"].items()}

    def set_paused(self, queue: str, paused: bool, *, now: datetime | None = None) -> None:
        self._call("set_paused", {"queue": validate_queue(queue), "paused": paused}, now=now)

    def paused_queues(self) -> list[str]:
        return [str(q) for q in self._call("paused_queues")["queues"]]

    def set_limits(self, limits: QueueLimits, *, now: datetime | None = None) -> None:
        lim = check_limits(limits)
        rate = None if lim.rate_limit is None else {"count": lim.rate_limit, "period": lim.rate_period}
        self._call("set_limits", {"queue": lim.queue, "concurrency": lim.concurrency, "rate": rate}, now=now)

    def queue_limits(self, *, now: datetime | None = None) -> list[QueueLimits]:
        return [QueueLimits(**d) for d in self._call("queue_limits", {}, now=now)["limits"]]

    def set_key_limits(self, limits: KeyLimits, *, now: datetime | None = None) -> None:
        lim = check_key_limits(limits)
        rate = None if lim.rate_limit is None else {"count": lim.rate_limit, "period": lim.rate_period}
        self._call("set_key_limits", {"pattern": lim.pattern, "concurrency": lim.concurrency, "rate": rate}, now=now)

    def key_limits(self, *, now: datetime | None = None) -> list[KeyLimits]:
        return [KeyLimits(**d) for d in self._call("key_limits", {}, now=now)["limits"]]

    # -- maintenance --------------------------------------------------------------------------
    def reap(self, limit: int, *, now: datetime | None = None) -> list[Reaped]:
        return [wire.decode_reaped(r) for r in self._call("reap", {"limit": limit}, now=now)["reaped"]]

    def lapse_leases(self, worker_ids: Sequence[str], *, now: datetime | None = None) -> int:
        """End the leases of these dead workers, those this token registered:
        a worker restarting on a host where another token's worker died (its
        start-up reconciliation names every dead predecessor on the host) is
        refused the others, and leaves them to the reaper (within the lease TTL
        plus a reaper interval) rather than fail to start."""
        ids = list(dict.fromkeys(worker_ids))
        while ids:
            try:
                return int(self._call("expire_leases", {"workers": ids}, now=now)["expired"])
            except NotYourWorker as exc:
                if not exc.workers or not set(exc.workers) & set(ids):
                    raise
                log.warning("not ending the leases of %s: %s; the reaper recovers their jobs once the leases lapse",
                            ", ".join(exc.workers), exc)
                ids = [i for i in ids if i not in exc.workers]
        return 0

    def register_worker(self, info: WorkerInfo, *, owner: str | None = None) -> None:
        check_worker_identity(info.id, info.host)
        if owner is not None:
            raise ConfigError("a tether server records a worker's owner itself, from the token that registers it")
        self._call("register_worker", {"id": info.id, "host": info.host, "pid": info.pid,
                                       "proc_start": info.proc_start, "queues": list(info.queues),
                                       "concurrency": info.concurrency, **tasks_field(info.tasks)})

    def unknown_tasks(self, *, since: float = model.LIVE_WITHIN, now: datetime | None = None) -> list[model.UnknownTaskJobs]:
        found = self._call("unknown_tasks", query={"since": round(since), "now": None if now is None else now.isoformat()})
        return [wire_unknown.decode_unknown(u) for u in found["unknown"]]

    def bury_unknown(
        self, queues: Sequence[str], *, grace: float, limit: int, now: datetime | None = None
    ) -> list[model.Buried]:
        body = {"queues": list(queues), "grace": grace, "limit": limit}
        return [wire_unknown.decode_buried(b) for b in self._call("bury_unknown", body, now=now)["buried"]]

    def worker_owners(self, worker_ids: Sequence[str]) -> dict[str, str | None]:
        raise ConfigError("worker owners are a tether server's own check; its API does not show them")

    def stop_worker(self, worker_id: str, *, now: datetime | None = None) -> None:
        """Mark a worker stopped. Another token's worker (a dead predecessor
        that start-up reconciliation found on this host) is not this token's to
        stop: that refusal is logged, not raised, so the worker still starts."""
        try:
            self._call("stop_worker", {"worker": worker_id}, now=now)
        except NotYourWorker as exc:
            if worker_id not in exc.workers:
                raise
            log.warning("not marking worker %s stopped: %s", worker_id, exc)

    def list_workers(self, *, host: str | None = None, live_only: bool = False) -> list[WorkerInfo]:
        found = self._call("list_workers", query={"host": host, "live_only": live_only})
        return [wire.decode_worker(w) for w in found["workers"]]

    def workers_page(self, *, limit: int = WORKERS_PAGE, offset: int = 0, live_only: bool = False,
                     host: str | None = None) -> list[WorkerInfo]:
        found = self._call("workers_page", query={"limit": limit, "offset": offset, "live_only": live_only,
                                                  "host": host})
        return [wire.decode_worker(w) for w in found["workers"]]

    def count_workers(self, *, owner: str | None = None, queue: str | None = None, live_only: bool = False,
                      since: float = model.LIVE_WITHIN, now: datetime | None = None) -> int:
        raise ConfigError("counting workers is a tether server's own check; its API shows stats and pages")

    def prune_workers(self, age: float, limit: int, *, owner: str | None = None,
                      now: datetime | None = None) -> list[str]:
        raise ConfigError("a tether server prunes its workers' rows itself (tether server --worker-retention)")

    # -- schedules (I6) ---------------------------------------------------------------------
    def sync_schedules(self, specs: Sequence[ScheduleSpec], *, now: datetime | None = None) -> None:
        self._call("sync_schedules", {"schedules": [wire_schedules.encode_spec(x) for x in specs]}, now=now)

    def fire_schedules(
        self, names: Sequence[str], *, grace: float, now: datetime | None = None, tasks: Sequence[str] = (),
        tags: TaskTags | None = None,
    ) -> list[FiredTick]:
        if not names and not tasks:
            return []
        body: dict[str, Any] = {"names": list(names), "grace": grace, **_tags_field(tags)}
        if tasks:  # only then: a server older than dynamic schedules refuses the field
            body["tasks"] = list(tasks)
        answer = self._call("fire_schedules", body, now=now)
        return [wire_schedules.decode_fired(t) for t in answer["fired"]]

    def add_schedule(self, spec: ScheduleSpec, *, now: datetime | None = None) -> None:
        self._call("add_schedule", wire_schedules.encode_spec(dynamic_spec(spec)), now=now)

    def set_schedule_paused(self, name: str, paused: bool, *, now: datetime | None = None) -> None:
        self._call("set_schedule_paused", {"name": name, "paused": bool(paused)}, now=now)

    def remove_schedule(self, name: str, *, now: datetime | None = None) -> None:
        self._call("remove_schedule", {"name": name}, now=now)

    def trigger_schedule(self, name: str, *, now: datetime | None = None, tags: TaskTags | None = None) -> FiredTick:
        body = {"name": name, **_tags_field(tags)}
        return wire_schedules.decode_fired(self._call("trigger_schedule", body, now=now))

    def list_schedules(self, *, now: datetime | None = None) -> list[ScheduleInfo]:
        query = {"now": None if now is None else now.isoformat()}
        return [wire_schedules.decode_schedule(x) for x in self._call("list_schedules", query=query)["schedules"]]

    def db_now(self) -> datetime:
        return datetime.fromisoformat(self._call("db_now")["now"])

    def destroy(self) -> None:
        self._call("destroy", {"confirm": "destroy"})

    def integrity_check(self) -> list[str]:
        return list(self._call("integrity_check")["problems"])

    def close(self) -> None:
        HttpClient.close(self)


def _tags_field(tags: TaskTags | None) -> dict[str, Any]:
    """The ``tags`` of a fire or trigger, only when a task has tags: a server
    older than them refuses the field (upgrade the server first)."""
    had = tagged(tags)
    return {"tags": had} if had else {}


def _jobs(found: dict[str, Any]) -> list[ClaimedJob]:
    return wire.decode_claimed_answer(found)
