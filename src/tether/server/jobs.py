"""The server's operations on jobs for producers and readers: enqueue, retry
and cancel, and the reads (a job, a list, the stats, the attempts audit,
throughput, due jobs no worker claimed).

Built with a delivering ``transport`` (NATS), the server announces the jobs
that enqueue and retry make queued and due, after the store has committed
them, as an app's own enqueue and retry do; its producers need no link to NATS.
"""

from __future__ import annotations

from collections.abc import Callable

from ..config import validate_queue
from ..errors import JobNotFound, PayloadError
from ..model import Outcome
from ..store.http import wire
from ..transport import announce, due_now
from .context import Args, Server

__all__ = ["JOBS"]


def _enqueue(s: Server, a: Args) -> Args:
    jobs = [wire.decode_new_job(j, s.max_payload) for j in a["jobs"]]
    ids = s.store.enqueue(jobs, now=a["now"])
    if s.transport is not None and s.transport.delivers:  # committed: announce it (never raises)
        announce(s.transport, due_now(jobs, ids))
    duplicates = [k for k, i in enumerate(ids) if getattr(i, "duplicate", False)]
    return {"ids": ids, "duplicates": duplicates} if duplicates else {"ids": ids}


def _retry(s: Server, a: Args) -> Args:
    queue = s.store.retry(a["job_id"], now=a["now"])
    if s.transport is not None:
        announce(s.transport, [(a["job_id"], queue)], retry=True)
    return {"queue": queue}


def _get_job(s: Server, a: Args) -> Args:
    job = s.store.get_job(a["job_id"])
    if job is None:
        raise JobNotFound(f"no job {a['job_id']}")
    return wire.encode_job(job)


def _list_jobs(s: Server, a: Args) -> Args:
    jobs = s.store.list_jobs(state=a.get("state"), queue=a.get("queue"), task=a.get("task"),
                             limit=a.get("limit", 50))
    return {"jobs": [wire.encode_job(j) for j in jobs]}


def _due_unclaimed(s: Server, a: Args) -> Args:
    queues = [validate_queue(q) for q in a["queues"]]
    jobs = s.store.due_unclaimed(queues, grace=a["grace"], limit=a["limit"], now=a["now"])
    return {"jobs": [wire.encode_due(j) for j in jobs]}


def _recent_attempts(s: Server, a: Args) -> Args:
    try:
        outcomes = [Outcome(o) for o in a["outcomes"].split(",")] if "outcomes" in a else list(Outcome)
    except ValueError as exc:
        raise PayloadError(f"outcomes: {exc}") from None
    return {"attempts": [wire.encode_attempt(x) for x in s.store.recent_attempts(outcomes, limit=a.get("limit", 50))]}


def _throughput(s: Server, a: Args) -> Args:
    found = s.store.throughput(buckets=a.get("buckets", 60), bucket_seconds=a.get("bucket_seconds", 60),
                               now=a["now"])
    return {"buckets": [wire.encode_throughput(t) for t in found]}


JOBS: dict[str, Callable[[Server, Args], Args]] = {
    "enqueue": _enqueue,
    "get_job": _get_job,
    "list_jobs": _list_jobs,
    "cancel": lambda s, a: {"state": str(s.store.cancel(a["job_id"], now=a["now"]))},
    "retry": _retry,
    "stats": lambda s, a: wire.encode_stats(s.store.stats()),
    "recent_attempts": _recent_attempts,
    "throughput": _throughput,
    "due_unclaimed": _due_unclaimed,
}
