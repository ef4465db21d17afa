"""The server's operations on many jobs (issue 43): search, count, the bulk
actions' batches and rerun, each the store's own (store/many.py) with the
filter decoded as an app's is checked (search.JobFilter). As an app's retry
does, the server announces the jobs a retry or rerun makes queued on a
delivering transport, after the store has committed them."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ConfigError
from ..store.http import wire
from ..store.http.wire_many import decode_filter
from ..store.many import Ended
from ..transport import announce
from .context import Args, Server
from .requests import ApiError

__all__ = ["MANY"]


def _search(s: Server, a: Args) -> Args:
    """Two ways to page. ``before`` (a job id; tether's own client, whose app
    checked its cursor): the jobs below it, as many as asked. Without it,
    the cursor way: ``after`` (a page's ``next``), refused (400) unless the
    same filter made it, and the answer's ``next`` continues."""
    f = decode_filter(a["filter"])
    if "before" in a:
        if "after" in a:
            raise ApiError(400, "bad_request", "give either before (a job id) or after (a page's next cursor), "
                                               "not both")
        jobs = s.store.search_jobs(f, limit=a["limit"], before_id=a["before"])
        return {"jobs": [wire.encode_job(j) for j in jobs]}
    try:
        before = None if a.get("after") is None else f.read_cursor(a["after"])
    except ConfigError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    found, cursor = f.page(s.store.search_jobs(f, limit=a["limit"] + 1, before_id=before), a["limit"])
    return {"jobs": [wire.encode_job(j) for j in found], "next": cursor}


def _cancel_many(s: Server, a: Args) -> Args:
    ended: list[Ended] | None = [] if a.get("ended") else None
    count, last = s.store.cancel_batch(decode_filter(a["filter"]), after_id=a["after"], limit=a["limit"],
                                       now=a["now"], ended=ended)
    answer: Args = {"count": count, "last": last}
    if ended is not None:
        answer["ended"] = [{"id": i, "task": t, "queue": q} for i, t, q in ended]
    return answer


def _retry_many(s: Server, a: Args) -> Args:
    retried, last = s.store.retry_batch(decode_filter(a["filter"]), after_id=a["after"], limit=a["limit"],
                                        now=a["now"])
    if retried and s.transport is not None and s.transport.delivers:
        announce(s.transport, retried, retry=True)
    return {"jobs": [{"id": i, "queue": q} for i, q in retried], "last": last}


def _delete_many(s: Server, a: Args) -> Args:
    count, last = s.store.delete_batch(decode_filter(a["filter"]), after_id=a["after"], limit=a["limit"])
    return {"count": count, "last": last}


def _rerun(s: Server, a: Args) -> Args:
    new_id = s.store.rerun(a["job_id"], now=a["now"])
    if s.transport is not None and s.transport.delivers:
        job = s.store.get_job(new_id)
        if job is not None:
            announce(s.transport, [(new_id, job.queue)])
    return {"id": new_id}


MANY: dict[str, Callable[[Server, Args], Args]] = {
    "search_jobs": _search,
    "count_jobs": lambda s, a: {"count": s.store.count_jobs(decode_filter(a["filter"]))},
    "cancel_many": _cancel_many,
    "retry_many": _retry_many,
    "delete_many": _delete_many,
    "rerun": _rerun,
}
