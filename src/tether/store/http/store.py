"""The Store interface over a tether server's HTTP API (``http://host:port``).

Standard library only (``http.client``): one keep-alive connection per thread,
like the database backends' connection per thread, so the heartbeat thread
never queues behind a claim. Errors come back as the same exceptions a local
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
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from ... import model
from ...config import DatabaseURL, check_limits, validate_queue
from ...errors import (
    AccessDenied,
    ConfigError,
    NotYourWorker,
    PayloadError,
    ServerUnavailable,
    StaleAttempt,
    TetherError,
)
from ...model import (
    Attempt,
    Beat,
    ClaimedJob,
    DueJob,
    FiredTick,
    Job,
    JobState,
    NewJob,
    Outcome,
    QueueLimits,
    Reaped,
    ScheduleInfo,
    ScheduleSpec,
    Stats,
    WorkerInfo,
)
from ..base import Store, check_prune
from ..buckets import Buckets, check_sizes
from . import wire, wire_schedules, wire_unknown

__all__ = ["HttpStore"]

log = logging.getLogger("tether.store.http")

DEFAULT_TIMEOUT = 10.0
#: how long a claim may wait on the server for jobs (capped at a quarter of the lease TTL)
DEFAULT_CLAIM_WAIT = 1.0
#: reuse a keep-alive connection only while it has been idle for less than this
#: (the server closes idle ones after 5 s; a request must not race that close)
REUSE_IDLE = 2.0


class _Conn:
    def __init__(self, conn: http.client.HTTPConnection) -> None:
        self.conn = conn
        self.last_used = time.monotonic()


class HttpStore(Store):
    backend = "http"
    default_poll_interval = 0.05  # claims long-poll on the server; this is only the gap between them

    def __init__(self, dsn: DatabaseURL, *, token: str | None = None) -> None:
        token = token or os.environ.get("TETHER_TOKEN")
        if not token:
            raise ConfigError(f"the tether server at {dsn.url} needs a token: pass token=..., --token, "
                              "or set TETHER_TOKEN")
        parts = urlsplit(dsn.url)
        self.url = dsn.url
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "localhost"
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._auth = f"Bearer {token}"
        self.timeout = float(dsn.options.get("timeout", DEFAULT_TIMEOUT))
        self.claim_wait = float(dsn.options.get("wait", DEFAULT_CLAIM_WAIT))
        self._local = threading.local()
        self._all: list[_Conn] = []
        self._lock = threading.Lock()
        #: False once the server turned out to predate the complete_and_claim operation
        self._combined = True

    def __repr__(self) -> str:
        return f"<HttpStore {self.url}>"

    # -- transport ------------------------------------------------------------------------
    def _connection(self) -> _Conn:
        c: _Conn | None = getattr(self._local, "conn", None)
        if c is not None and time.monotonic() - c.last_used < REUSE_IDLE:
            return c
        if c is not None:
            self._drop(c)
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        c = _Conn(cls(self._host, self._port, timeout=self.timeout))
        self._local.conn = c
        with self._lock:
            self._all.append(c)
        return c

    def _drop(self, c: _Conn) -> None:
        c.conn.close()
        with self._lock:
            if c in self._all:
                self._all.remove(c)
        if getattr(self._local, "conn", None) is c:
            self._local.conn = None

    def _call(self, name: str, body: dict[str, Any] | None = None, *, path: dict[str, Any] | None = None,
              query: dict[str, Any] | None = None, timeout: float | None = None,
              now: datetime | None = None) -> dict[str, Any]:
        op = wire.OPS_BY_NAME[name]
        target = self._prefix + op.path.format(**{k: quote(str(v)) for k, v in (path or {}).items()})
        if query:
            target += "?" + urlencode({k: (str(v).lower() if isinstance(v, bool) else v)
                                       for k, v in query.items() if v is not None})
        headers = {"Authorization": self._auth, "Accept": "application/json"}
        payload: bytes | None = None
        if op.body is not None:
            data = dict(body or {})
            if now is not None:
                data["now"] = now.isoformat()
            payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        c = self._connection()
        try:
            if c.conn.sock is not None:
                c.conn.sock.settimeout(timeout or self.timeout)
            else:
                c.conn.timeout = timeout or self.timeout
            c.conn.request(op.method, target, body=payload, headers=headers)
            resp = c.conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            self._drop(c)
            raise ServerUnavailable(f"tether server {self.url} unreachable during {name}: "
                                    f"{type(exc).__name__}: {exc or 'no answer'}") from None
        c.last_used = time.monotonic()
        if resp.will_close:
            self._drop(c)
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise ServerUnavailable(f"tether server {self.url} answered {name} with HTTP {resp.status} "
                                    "and no JSON: is this a tether server?")
        if resp.status == 200:
            return answer
        raise _error(resp.status, answer, name, self.url)

    # -- schema ---------------------------------------------------------------------------
    def migrate(self) -> list[str]:
        return list(self._call("migrate")["applied"])

    def check_schema(self) -> None:
        self._call("check_schema")

    def schema_objects(self) -> dict[str, list[str]]:
        return dict(self._call("schema_objects")["objects"])

    # -- producers ------------------------------------------------------------------------
    def enqueue(self, jobs: Sequence[NewJob], *, now: datetime | None = None) -> list[int]:
        if not jobs:
            return []
        return list(self._call("enqueue", {"jobs": [_encode_new(j) for j in jobs]}, now=now)["ids"])

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

    def claim(
        self, worker: str, queues: Sequence[str], limit: int, lease_ttl: float, *, now: datetime | None = None,
        tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        wait = self._claim_wait(lease_ttl, now)
        body = {"worker": worker, "queues": list(queues), "limit": limit, "lease_ttl": lease_ttl, "wait": wait,
                **_tasks(tasks)}
        found = self._call("claim", body, now=now, timeout=self.timeout + wait)
        return [wire.decode_claimed(j) for j in found["jobs"]]

    def complete_and_claim(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], queues: Sequence[str], limit: int,
        lease_ttl: float, *, now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        if not done:
            return set(), self.claim(worker, queues, limit, lease_ttl, now=now, tasks=tasks)
        if self._combined:
            wait = self._claim_wait(lease_ttl, now)
            body = {"worker": worker, "done": _done_rows(done), "queues": list(queues), "limit": limit,
                    "lease_ttl": lease_ttl, "wait": wait, **_tasks(tasks)}
            try:
                found = self._call("complete_and_claim", body, now=now, timeout=self.timeout + wait)
            except _UnknownOperation:
                # The server answered that it has no such route, so nothing was
                # written: the same round in two requests, now and from now on.
                self._combined = False
                log.warning("tether server %s predates complete_and_claim: each worker round takes two requests "
                            "(complete, then claim) until it is upgraded", self.url)
            else:
                return set(found["accepted"]), [wire.decode_claimed(j) for j in found["jobs"]]
        return super().complete_and_claim(worker, done, queues, limit, lease_ttl, now=now, tasks=tasks)

    def claim_ids(
        self, worker: str, ids: Sequence[int], queues: Sequence[str], lease_ttl: float, *,
        now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        if not ids:
            return []
        body = {"worker": worker, "ids": list(ids), "queues": list(queues), "lease_ttl": lease_ttl, **_tasks(tasks)}
        return [wire.decode_claimed(j) for j in self._call("claim_ids", body, now=now)["jobs"]]

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
        return set(self._call("complete", {"worker": worker, "done": _done_rows(done)}, now=now)["accepted"])

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

    # -- maintenance --------------------------------------------------------------------------
    def reap(self, limit: int, *, now: datetime | None = None) -> list[Reaped]:
        return [wire.decode_reaped(r) for r in self._call("reap", {"limit": limit}, now=now)["reaped"]]

    def expire_leases(self, worker_ids: Sequence[str], *, now: datetime | None = None) -> int:
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
        if owner is not None:
            raise ConfigError("a tether server records a worker's owner itself, from the token that registers it")
        self._call("register_worker", {"id": info.id, "host": info.host, "pid": info.pid,
                                       "proc_start": info.proc_start, "queues": list(info.queues),
                                       "concurrency": info.concurrency, **_tasks(info.tasks)})

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

    # -- schedules (I6) ---------------------------------------------------------------------
    def sync_schedules(self, specs: Sequence[ScheduleSpec], *, now: datetime | None = None) -> None:
        self._call("sync_schedules", {"schedules": [wire_schedules.encode_spec(x) for x in specs]}, now=now)

    def fire_schedules(
        self, names: Sequence[str], *, grace: float, now: datetime | None = None
    ) -> list[FiredTick]:
        if not names:
            return []
        answer = self._call("fire_schedules", {"names": list(names), "grace": grace}, now=now)
        return [wire_schedules.decode_fired(t) for t in answer["fired"]]

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
        with self._lock:
            conns, self._all = self._all, []
        for c in conns:
            c.conn.close()


class _UnknownOperation(PayloadError):
    """The server has no route for this operation (an older server): 404 ``not_found``."""


def _done_rows(done: Sequence[tuple[int, int, str | None]]) -> list[dict[str, Any]]:
    return [{"id": i, "attempt": a, **({} if r is None else {"result": json.loads(r)})} for i, a, r in done]


def _encode_new(j: NewJob) -> dict[str, Any]:
    try:
        args = json.loads(j.args_json)
        meta = None if j.meta_json is None else json.loads(j.meta_json)
    except ValueError as exc:
        raise PayloadError(f"args of task {j.task!r} are not JSON: {exc}") from None
    if not isinstance(args, dict):
        raise PayloadError(f"args of task {j.task!r} must be a JSON object of keyword arguments")
    return {"task": j.task, "args": args, "queue": j.queue, "priority": j.priority,
            "run_at": None if j.run_at is None else j.run_at.isoformat(), "delay": j.delay,
            "max_attempts": j.max_attempts, "lease_ttl": j.lease_ttl, "timeout": j.timeout,
            "backoff_base": j.backoff_base, "dedup_key": j.dedup_key, "meta": meta,
            **({} if j.exclusive_key is None else {"exclusive_key": j.exclusive_key})}


def _error(status: int, answer: dict[str, Any], op: str, url: str) -> TetherError:
    code, message = str(answer.get("error", "")), str(answer.get("message", f"HTTP {status}"))
    if code == "stale_attempt":
        return StaleAttempt(int(answer["job_id"]), int(answer["attempt"]), str(answer["worker"]), str(answer["op"]))
    if code == "not_your_worker":
        workers = answer.get("workers")
        return NotYourWorker(f"tether server {url} refused {op}: {message}",
                             [str(w) for w in workers] if isinstance(workers, list) else [])
    if code in wire.ERRORS:
        return wire.ERRORS[code][1](message)
    if status in (401, 403):
        return AccessDenied(f"tether server {url} refused {op}: {message}")
    if status >= 500:
        return ServerUnavailable(f"tether server {url} failed {op} (HTTP {status}): {message}")
    if status == 404 and code == "not_found":
        return _UnknownOperation(f"tether server {url} has no route for {op} (HTTP 404): {message}; is the URL's "
                                 "path right, and is the server as new as this client?")
    if code == "client_clock_refused":
        return ConfigError(message)
    return PayloadError(f"tether server {url} refused {op} (HTTP {status} {code}): {message}")


def _tasks(tasks: Sequence[str] | None) -> dict[str, Any]:
    """A body's tasks field: left out for None (any task), so an older server still takes the request."""
    return {} if tasks is None else {"tasks": sorted(tasks)}
