"""tether's records as the HTTP API's JSON and back: one encoder and one
decoder per record type, shared by the server and the client (``wire``
re-exports them beside the operations they travel in)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from ...config import check_when, validate_queue
from ...errors import PayloadError
from ...model import Attempt, ClaimedJob, DueJob, Job, JobState, NewJob, Outcome, Reaped, Stats, Throughput, WorkerInfo
from ...payload import check_key, dump_json
from ...search import check_meta, check_tags
from ..columns import INSERTED, READ, Column, Kind
from .schema import parse_datetime
from .wire_unknown import decode_unknown, encode_unknown

__all__ = [
    "CLAIMED_FIELDS",
    "decode_attempt",
    "decode_claimed",
    "decode_claimed_answer",
    "decode_due",
    "decode_job",
    "decode_new_job",
    "decode_reaped",
    "decode_stats",
    "decode_throughput",
    "decode_worker",
    "encode_attempt",
    "encode_claimed",
    "encode_claimed_all",
    "encode_claimed_rows",
    "encode_due",
    "encode_job",
    "encode_new_job",
    "encode_reaped",
    "encode_stats",
    "encode_throughput",
    "encode_worker",
]


# -- records --------------------------------------------------------------------------------
def _dt(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _parse_dt(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _req_dt(value: str) -> datetime:
    return datetime.fromisoformat(value)


def encode_attempt(a: Attempt) -> dict[str, Any]:
    return {"job_id": a.job_id, "attempt": a.attempt, "worker": a.worker, "claimed_at": _dt(a.claimed_at),
            "finished_at": _dt(a.finished_at), "outcome": None if a.outcome is None else str(a.outcome),
            "error": a.error, "traceback": a.traceback}


def decode_attempt(d: dict[str, Any]) -> Attempt:
    return Attempt(job_id=d["job_id"], attempt=d["attempt"], worker=d["worker"], claimed_at=_req_dt(d["claimed_at"]),
                   finished_at=_parse_dt(d["finished_at"]),
                   outcome=None if d["outcome"] is None else Outcome.read(d["outcome"]),
                   error=d["error"], traceback=d["traceback"])


#: how each kind of column (store/columns.py) is written into a job record and read back
_TO_WIRE: dict[Kind, Callable[[Any], Any]] = {"time": _dt, "state": str}
_FROM_WIRE: dict[Kind, Callable[[Any], Any]] = {"time": _parse_dt, "state": JobState}
#: (wire name, Job attribute, encoder or None) per column a Job is made of
_JOB_OUT = [(c.wire, c.name, _TO_WIRE.get(c.kind)) for c in READ]
#: (wire name, Job attribute, decoder or None, optional) likewise
_JOB_IN = [(c.wire, c.name, _FROM_WIRE.get(c.kind), c.wire_optional) for c in READ]


def encode_job(j: Job) -> dict[str, Any]:
    """A Job as its record: the declared columns under their wire names, and its attempts."""
    d: dict[str, Any] = {}
    for key, name, out in _JOB_OUT:
        value = getattr(j, name)
        d[key] = value if out is None or value is None else out(value)
    d["attempts"] = [encode_attempt(a) for a in j.attempts]
    d["older_attempts"] = j.older_attempts
    return d


def decode_job(d: dict[str, Any]) -> Job:
    """A job record as a Job; a column added after the API's first release
    (``wire_optional``) may be missing, from an older server."""
    fields: dict[str, Any] = {}
    for key, name, read, optional in _JOB_IN:
        value = d.get(key) if optional else d[key]
        fields[name] = value if read is None or value is None else read(value)
    return Job(**fields, attempts=[decode_attempt(a) for a in d["attempts"]],
               older_attempts=d.get("older_attempts", 0))  # an older server does not send it


#: the columns an enqueue request names that are keys (bounded, indexable: payload.check_key)
_KEYS = ("dedup_key", "exclusive_key", "limit_key")
#: enqueue fields a JSON integer may arrive in but that are floats
_FLOATS = ("delay", "backoff_base")


def encode_new_job(j: NewJob) -> dict[str, Any]:
    """A NewJob as an enqueue request's job: the INSERTED columns under their
    wire names (args and meta as JSON values), run_at and delay. A column the
    API's first release lacked (``wire_optional``) is left out when None, so
    that an older server, which refuses a field it does not know, still takes
    a job that does not use it."""
    try:
        values = {c.wire: _new_value(c, j) for c in INSERTED}
    except ValueError as exc:
        raise PayloadError(f"args of task {j.task!r} are not JSON: {exc}") from None
    if not isinstance(values["args"], dict):
        raise PayloadError(f"args of task {j.task!r} must be a JSON object of keyword arguments")
    for c in INSERTED:
        if c.wire_optional and values[c.wire] is None:
            del values[c.wire]
    return {**values, "run_at": _dt(j.run_at), "delay": j.delay}


def _new_value(c: Column, j: NewJob) -> Any:
    value = getattr(j, c.insert or c.name)
    if value is None:
        return None
    return json.loads(value) if c.kind == "json" else _dt(value) if c.kind == "time" else value


def decode_new_job(d: dict[str, Any], cap: int) -> NewJob:
    """An enqueue request's job (schema-checked: NEW_JOB) as a NewJob; a field
    left out takes NewJob's default. ConfigError or PayloadError names what
    is wrong: a time out of range, a key or a JSON value that cannot be stored."""
    where = f"task {d['task']!r}"
    run_at = None if d.get("run_at") is None else parse_datetime(d["run_at"])
    check_when(where, d.get("delay", 0.0), run_at)
    for name in _KEYS:
        check_key(where, name, d.get(name))
    if d.get("tags") is not None:  # as an app checks them (search.py)
        check_tags(where, d["tags"])
    if d.get("meta") is not None:
        check_meta(where, d["meta"], cap)
    values: dict[str, Any] = {"run_at": run_at}
    for c in INSERTED:
        if c.wire in d:
            value = d[c.wire]
            if c.kind == "json" and value is not None:
                value = dump_json(value, f"args of {where}" if c.name == "args" else c.wire, cap)
            elif c.kind == "time" and value is not None:
                value = parse_datetime(value)
            values[c.insert or c.name] = value
    values["queue"] = validate_queue(values.get("queue", "default"))
    for name in _FLOATS:
        if name in d:
            values[name] = float(d[name])
    return NewJob(**values)


def encode_claimed(c: ClaimedJob, dt: Callable[[datetime | None], str | None] = _dt) -> dict[str, Any]:
    return {"id": c.id, "attempt": c.attempt, "task": c.task, "args": c.args, "queue": c.queue,
            "priority": c.priority, "max_attempts": c.max_attempts, "lease_ttl": c.lease_ttl, "timeout": c.timeout,
            "claimed_at": dt(c.claimed_at), "meta": c.meta, "run_at": dt(c.run_at),
            "scheduled_for": dt(c.scheduled_for), "trace": c.trace}


def _times() -> Callable[[datetime | None], str | None]:
    """``_dt`` that writes each distinct time once: a claim's jobs share their
    claimed_at, and jobs enqueued together their run_at. The time just written
    is looked at first: two times with one tzinfo and one fold that compare
    equal have the same fields, so the same text (no offset to work out)."""
    seen: dict[tuple[datetime, timedelta | None], str] = {}
    last: list[Any] = [None, None]  # the time last written, and its text

    def dt(value: datetime | None) -> str | None:
        if value is None:
            return None
        prev = last[0]
        if prev is not None and value.tzinfo is prev.tzinfo and value.fold == prev.fold and value == prev:
            text: str = last[1]
            return text
        key = (value, value.utcoffset())  # equal instants in other offsets are written otherwise
        text = seen.get(key) or seen.setdefault(key, value.isoformat())
        last[0], last[1] = value, text
        return text

    return dt


def encode_claimed_all(jobs: Sequence[ClaimedJob]) -> list[dict[str, Any]]:
    """``encode_claimed`` for a claim's jobs, each distinct time written once."""
    dt = _times()
    return [encode_claimed(c, dt) for c in jobs]


#: a claimed job's fields in the order ``encode_claimed_rows`` writes them
CLAIMED_FIELDS = ("id", "attempt", "task", "args", "queue", "priority", "max_attempts", "lease_ttl", "timeout",
                  "claimed_at", "meta", "run_at", "scheduled_for", "trace")


def encode_claimed_rows(jobs: Sequence[ClaimedJob]) -> dict[str, Any]:
    """A claim's jobs as ``{"fields": [...], "rows": [[...], ...]}``, the form
    a client asks for with ``ROWS_HEADER``: no key repeated per job, so about
    half the bytes of the records and half the time to write and to parse."""
    claimed, run, scheduled = _times(), _times(), _times()  # each field's times repeat in turn
    return {"fields": list(CLAIMED_FIELDS),
            "rows": [[c.id, c.attempt, c.task, c.args, c.queue, c.priority, c.max_attempts, c.lease_ttl, c.timeout,
                      claimed(c.claimed_at), c.meta, run(c.run_at), scheduled(c.scheduled_for),
                      c.trace] for c in jobs]}


def decode_claimed_answer(found: dict[str, Any]) -> list[ClaimedJob]:
    """A claim's jobs from its answer: rows (a server that knows ``ROWS_HEADER``)
    or records (an older one). Rows are read by the names in ``fields``, so a
    server that writes more fields, or in another order, is read all the same."""
    rows: list[list[Any]] | None = found.get("rows")
    if rows is None:
        return [decode_claimed(d) for d in found["jobs"]]
    fields = found["fields"]
    if tuple(fields) != CLAIMED_FIELDS:
        return [decode_claimed(dict(zip(fields, r, strict=True))) for r in rows]
    parsed: dict[str, datetime] = {}  # each distinct time parsed once

    def req(text: str) -> datetime:
        value = parsed.get(text)
        if value is None:
            value = parsed[text] = datetime.fromisoformat(text)
        return value

    def opt(text: str | None) -> datetime | None:
        return None if text is None else req(text)

    return [ClaimedJob(id=i, attempt=a, task=t, args=args, queue=q, priority=p, max_attempts=m, lease_ttl=ttl,
                       timeout=to, claimed_at=req(c), meta=meta, run_at=opt(r), scheduled_for=opt(sf), trace=tr)
            for i, a, t, args, q, p, m, ttl, to, c, meta, r, sf, tr in rows]


def decode_claimed(d: dict[str, Any]) -> ClaimedJob:
    return ClaimedJob(id=d["id"], attempt=d["attempt"], task=d["task"], args=d["args"], queue=d["queue"],
                      priority=d["priority"], max_attempts=d["max_attempts"], lease_ttl=d["lease_ttl"],
                      timeout=d["timeout"], claimed_at=_req_dt(d["claimed_at"]), meta=d["meta"],
                      run_at=_parse_dt(d["run_at"]), scheduled_for=_parse_dt(d.get("scheduled_for")),
                      trace=d.get("trace"))  # an older server does not send it


def encode_reaped(r: Reaped) -> dict[str, Any]:
    return {"id": r.id, "attempt": r.attempt, "worker": r.worker, "outcome": str(r.outcome), "state": str(r.state),
            "queue": r.queue, "lease_until": _dt(r.lease_until)}


def decode_reaped(d: dict[str, Any]) -> Reaped:
    return Reaped(id=d["id"], attempt=d["attempt"], worker=d["worker"], outcome=Outcome.read(d["outcome"]),
                  state=JobState(d["state"]), queue=d["queue"], lease_until=_parse_dt(d["lease_until"]))


def encode_due(j: DueJob) -> dict[str, Any]:
    return {"id": j.id, "queue": j.queue, "attempt": j.attempt, "run_at": _dt(j.run_at)}


def decode_due(d: dict[str, Any]) -> DueJob:
    return DueJob(id=d["id"], queue=d["queue"], attempt=d["attempt"], run_at=_req_dt(d["run_at"]))


def encode_throughput(t: Throughput) -> dict[str, Any]:
    return {"start": _dt(t.start), "seconds": t.seconds, "counts": {str(o): n for o, n in t.counts.items()}}


def decode_throughput(d: dict[str, Any]) -> Throughput:
    """Every outcome this release knows is a key (zero when the server did not
    send it: an older one); one it does not know (a newer server's) is kept."""
    return Throughput(start=_req_dt(d["start"]), seconds=d["seconds"],
                      counts={**dict.fromkeys(Outcome, 0), **{Outcome.read(o): n for o, n in d["counts"].items()}})


def encode_worker(w: WorkerInfo) -> dict[str, Any]:
    return {"id": w.id, "host": w.host, "pid": w.pid, "proc_start": w.proc_start, "started_at": _dt(w.started_at),
            "last_seen": _dt(w.last_seen), "queues": list(w.queues), "concurrency": w.concurrency,
            "stopped_at": _dt(w.stopped_at), "tasks": w.tasks}


def decode_worker(d: dict[str, Any]) -> WorkerInfo:
    return WorkerInfo(id=d["id"], host=d["host"], pid=d["pid"], proc_start=d["proc_start"],
                      started_at=_req_dt(d["started_at"]), last_seen=_req_dt(d["last_seen"]),
                      queues=list(d["queues"]), concurrency=d["concurrency"], stopped_at=_parse_dt(d["stopped_at"]),
                      tasks=None if d.get("tasks") is None else list(d["tasks"]))


def encode_stats(s: Stats) -> dict[str, Any]:
    return {
        "counts": [{"queue": q, "state": st, "count": n} for (q, st), n in sorted(s.counts.items())],
        "oldest_queued": {q: _dt(t) for q, t in s.oldest_queued.items()},
        "workers": [encode_worker(w) for w in s.workers],
        "now": _dt(s.now),
        "unknown": [encode_unknown(u) for u in s.unknown],
        "workers_total": len(s.workers) if s.workers_total is None else s.workers_total,
    }


def decode_stats(d: dict[str, Any]) -> Stats:
    return Stats(
        counts={(c["queue"], c["state"]): c["count"] for c in d["counts"]},
        oldest_queued={q: _req_dt(t) for q, t in d["oldest_queued"].items()},
        workers=[decode_worker(w) for w in d["workers"]],
        now=_req_dt(d["now"]),
        unknown=[decode_unknown(u) for u in d.get("unknown", [])],
        workers_total=d.get("workers_total"),
    )
