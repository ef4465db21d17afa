"""The HTTP API's one description, shared by the server and the HTTP store:
every operation (method, path, scope, request and response schema), the JSON
form of every record, and the error codes with their HTTP statuses.

The server builds its routes, its request validation and ``/openapi.json``
from ``OPS``; the client builds its requests from the same table, so the three
cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ...cron import MAX_CATCH_UP
from ...errors import (
    ConfigError,
    InvalidDSN,
    InvalidTransition,
    JobNotFound,
    PayloadError,
    SchemaMissing,
    StaleAttempt,
    TetherError,
    UnknownTask,
)
from ...model import (
    TERMINAL_STATES,
    Attempt,
    Beat,
    ClaimedJob,
    DueJob,
    Job,
    JobState,
    Outcome,
    Reaped,
    Stats,
    Throughput,
    WorkerInfo,
)
from ..buckets import MAX_BUCKET_SECONDS, MAX_BUCKETS
from .schema import (
    ANY_JSON,
    DATETIME,
    INT53_MAX,
    Schema,
    array,
    boolean,
    integer,
    nullable,
    number,
    obj,
    string,
)
from .wire_unknown import BURIED_RECORD, TASKS, UNKNOWN_RECORD, decode_unknown, encode_unknown

__all__ = [
    "ERRORS",
    "OPS",
    "SCOPES",
    "Op",
    "decode_attempt",
    "decode_claimed",
    "decode_due",
    "decode_job",
    "decode_reaped",
    "decode_stats",
    "decode_throughput",
    "decode_worker",
    "encode_attempt",
    "encode_claimed",
    "encode_due",
    "encode_job",
    "encode_reaped",
    "encode_stats",
    "encode_throughput",
    "encode_worker",
    "error_code",
    "request_query",
    "request_schema",
]

SCOPES = ("worker", "producer", "admin")
MAX_CLAIM_WAIT = 30.0

# -- field schemas ------------------------------------------------------------------
JOB_ID = integer(1, INT53_MAX)
ATTEMPT = integer(0)
WORKER_ID = string(200, 1)
QUEUE = string(63, 1, "^[A-Za-z0-9_][A-Za-z0-9_.\\-]{0,62}$")  # config.validate_queue
TASK = string(200, 1)
TTL = number(0, 1e6, exclusive_min=True)
STATE = {"type": "string", "enum": [str(s) for s in JobState]}
OUTCOME = {"type": "string", "enum": [str(o) for o in Outcome]}
FAIL_OUTCOME = {"type": "string", "enum": [str(o) for o in (Outcome.FAILED, Outcome.TIMED_OUT,
                                                                Outcome.CANCELLED, Outcome.LEASE_EXPIRED,
                                                                Outcome.SNOOZED, Outcome.DISCARDED)]}
JSON_OBJECT: Schema = {"type": "object"}
TEXT = string(100_000)

ATTEMPT_RECORD = obj({
    "job_id": JOB_ID, "attempt": ATTEMPT, "worker": string(1000), "claimed_at": DATETIME,
    "finished_at": nullable(DATETIME), "outcome": nullable(OUTCOME), "error": nullable(string(10**7)),
    "traceback": nullable(string(10**7)),
})
JOB_RECORD = obj({
    "id": JOB_ID, "queue": string(1000), "task": string(1000), "args": ANY_JSON, "state": STATE,
    "priority": integer(-(2**31), 2**31 - 1), "run_at": DATETIME, "attempt": ATTEMPT, "released": ATTEMPT,
    "max_attempts": ATTEMPT, "lease_ttl": nullable({"type": "number"}), "timeout": nullable({"type": "number"}),
    "dedup_key": nullable(string(10**6)), "locked_by": nullable(string(1000)), "claimed_at": nullable(DATETIME),
    "lease_until": nullable(DATETIME), "cancel_requested": boolean(), "progress": nullable({"type": "number"}),
    "progress_message": nullable(string(10**7)), "result": ANY_JSON, "last_error": nullable(string(10**7)),
    "created_at": DATETIME, "finished_at": nullable(DATETIME), "meta": ANY_JSON,
    "attempts": array(ATTEMPT_RECORD, 10**6),
    "schedule": nullable(string(1000)), "scheduled_for": nullable(DATETIME),
}, optional=("schedule", "scheduled_for"))  # optional: servers older than schedules do not send them
CLAIMED_RECORD = obj({
    "id": JOB_ID, "attempt": ATTEMPT, "task": string(1000), "args": ANY_JSON, "queue": string(1000),
    "priority": integer(-(2**31), 2**31 - 1), "max_attempts": ATTEMPT, "lease_ttl": {"type": "number"},
    "timeout": nullable({"type": "number"}), "claimed_at": DATETIME, "meta": ANY_JSON, "run_at": nullable(DATETIME),
    "scheduled_for": nullable(DATETIME),
}, optional=("scheduled_for",))  # optional: servers older than schedules do not send it
REAPED_RECORD = obj({"id": JOB_ID, "attempt": ATTEMPT, "worker": string(1000), "outcome": OUTCOME,
                     "state": STATE, "queue": string(1000), "lease_until": nullable(DATETIME)})
DUE_RECORD = obj({"id": JOB_ID, "queue": string(1000), "attempt": ATTEMPT, "run_at": DATETIME})
_ONE_OUTCOME = "(" + "|".join(str(o) for o in Outcome) + ")"
OUTCOME_LIST = string(1000, 1, f"^{_ONE_OUTCOME}(,{_ONE_OUTCOME})*$")
WORKER_RECORD = obj({
    "id": string(1000), "host": string(1000), "pid": integer(-(2**31), 2**31 - 1),
    "proc_start": nullable(integer(-(2**63), 2**63 - 1)), "started_at": DATETIME, "last_seen": DATETIME,
    "queues": array(string(1000), 10**4), "concurrency": integer(-(2**31), 2**31 - 1),
    "stopped_at": nullable(DATETIME), "tasks": nullable(array(string(1000), 10**5)),
}, optional=("tasks",))
STATS_RECORD = obj({
    "counts": array(obj({"queue": string(1000), "state": STATE, "count": integer(0, 2**63 - 1)}), 10**6),
    "oldest_queued": {"type": "object", "additionalProperties": DATETIME},
    "workers": array(WORKER_RECORD, 10**6),
    "now": DATETIME,
    "unknown": array(UNKNOWN_RECORD, 10**6),
}, optional=("unknown",))
THROUGHPUT_RECORD = obj({
    "start": DATETIME, "seconds": integer(1, MAX_BUCKET_SECONDS),
    "counts": obj({str(o): integer(0, 2**63 - 1) for o in Outcome}),
})
NEW_JOB = obj(
    {
        "task": TASK, "args": JSON_OBJECT, "queue": QUEUE, "priority": integer(-(2**31) + 1, 2**31 - 1),
        "run_at": nullable(DATETIME), "delay": number(0, 1e8), "max_attempts": integer(1),
        "lease_ttl": nullable(TTL), "timeout": nullable(TTL), "backoff_base": number(0, 1e6),
        "dedup_key": nullable(string(1000, 1)), "meta": nullable(JSON_OBJECT),
    },
    optional=("queue", "priority", "run_at", "delay", "max_attempts", "lease_ttl", "timeout", "backoff_base",
              "dedup_key", "meta"),
)
# schedules (I6); records encoded by wire_schedules.py
SCHEDULE_SPEC = obj({
    "name": TASK, "cron": string(200, 1), "timezone": string(100, 1), "args": JSON_OBJECT, "queue": QUEUE,
    "catch_up": integer(0, MAX_CATCH_UP), "overlap": boolean(), "priority": integer(-(2**31) + 1, 2**31 - 1),
    "max_attempts": integer(1, 2**31 - 1), "lease_ttl": nullable(TTL), "timeout": nullable(TTL),
    "backoff_base": number(0, 1e6),
})
SCHEDULE_RECORD = obj({
    "name": string(1000), "cron": string(1000), "timezone": string(1000), "args": ANY_JSON, "queue": string(1000),
    "catch_up": integer(0), "overlap": boolean(), "since": nullable(DATETIME), "next_tick": nullable(DATETIME),
    "last_tick": nullable(DATETIME), "last_fired": nullable(DATETIME), "last_job_id": nullable(JOB_ID),
    "skipped": integer(0), "orphaned": boolean(), "last_seen": nullable(DATETIME),
})
FIRED_RECORD = obj({"schedule": string(1000), "tick": DATETIME, "job_id": nullable(JOB_ID), "queue": string(1000)})
ERROR_RECORD: Schema = {
    "type": "object",
    "properties": {"error": string(100), "message": string(10**6)},
    "required": ["error", "message"],
}
EMPTY = obj({})
#: retention: {finished state: age in seconds}, and what went (or would), by state
AGES = obj({str(st): number(0, 1e11) for st in TERMINAL_STATES}, optional=tuple(str(st) for st in TERMINAL_STATES))
PRUNED = obj({str(st): integer(0, 2**63 - 1) for st in TERMINAL_STATES},
             optional=tuple(str(st) for st in TERMINAL_STATES))
#: successes to record, each fenced on its own (id, attempt) and the request's worker
DONE = array(obj({"id": JOB_ID, "attempt": ATTEMPT, "result": ANY_JSON}, optional=("result",)), 10_000)


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of the API."""

    name: str
    method: str
    path: str
    scopes: tuple[str, ...]  # any of these grants access; admin grants everything
    summary: str
    response: Schema
    body: Schema | None = None  # without ``now``; see request_schema
    takes_now: bool = False  # accepts a client clock (testing servers only)
    query: dict[str, Schema] = field(default_factory=dict)
    errors: tuple[int, ...] = ()  # statuses beyond those every operation may answer
    #: the body field naming the worker id (or the list of ids) this request
    #: acts for: a worker token may act only for the workers it registered
    acts_for: str | None = None

    @property
    def path_params(self) -> list[str]:
        return [part[1:-1] for part in self.path.split("/") if part.startswith("{")]


W, P, A = ("worker",), ("producer",), ("admin",)
ANY = ("worker", "producer")

OPS: list[Op] = [
    # producers
    Op("enqueue", "POST", "/v1/jobs", P, "Enqueue jobs (one or many, in one statement); ids in input order",
       obj({"ids": array(JOB_ID, 10_000)}), body=obj({"jobs": array(NEW_JOB, 10_000)}), takes_now=True,
       errors=(422,)),
    Op("get_job", "GET", "/v1/jobs/{job_id}", ANY, "One job with its attempts history", JOB_RECORD,
       errors=(404,)),
    Op("list_jobs", "GET", "/v1/jobs", P, "Jobs, newest first", obj({"jobs": array(JOB_RECORD, 10_000)}),
       query={"state": STATE, "queue": string(1000), "task": string(1000), "limit": integer(1, 10_000)}),
    Op("cancel", "POST", "/v1/jobs/{job_id}/cancel", P,
       "Cancel: a queued job at once, a running one by a request its worker sees", obj({"state": STATE}),
       body=obj({}), takes_now=True, errors=(404, 409)),
    Op("retry", "POST", "/v1/jobs/{job_id}/retry", P, "A dead or cancelled job back to queued; its queue",
       obj({"queue": string(1000)}), body=obj({}), takes_now=True, errors=(404, 409)),
    Op("recent_attempts", "GET", "/v1/attempts", ANY,
       "Finished attempts with one of these outcomes (comma-separated; default: any), the most recently "
       "finished first",
       obj({"attempts": array(ATTEMPT_RECORD, 10_000)}),
       query={"outcomes": OUTCOME_LIST, "limit": integer(1, 10_000)}, errors=(422,)),
    Op("throughput", "GET", "/v1/throughput", ANY,
       "Finished attempts by outcome in each of the last `buckets` buckets of `bucket_seconds` (default 60 x 60 "
       "s), oldest first; buckets start on multiples of their size since the epoch, the last holds the "
       "server's now",
       obj({"buckets": array(THROUGHPUT_RECORD, MAX_BUCKETS)}),
       query={"buckets": integer(1, MAX_BUCKETS), "bucket_seconds": integer(1, MAX_BUCKET_SECONDS)},
       takes_now=True, errors=(422,)),
    Op("stats", "GET", "/v1/stats", P, "Counts by queue and state, oldest due job per queue, live workers",
       STATS_RECORD),
    # workers: claim, heartbeat, report (all fenced)
    Op("claim", "POST", "/v1/claim", W,
       "Claim up to limit due jobs; with wait > 0, hold the request until jobs arrive or wait seconds pass",
       obj({"jobs": array(CLAIMED_RECORD, 1000)}),
       body=obj({"worker": WORKER_ID, "queues": array(QUEUE, 100, 1), "limit": integer(1, 1000), "lease_ttl": TTL,
                 "wait": number(0, MAX_CLAIM_WAIT), "tasks": TASKS}, optional=("wait", "tasks")),
       takes_now=True, errors=(422,), acts_for="worker"),
    Op("claim_ids", "POST", "/v1/claim-ids", W,
       "Claim these jobs (ids a transport delivered), each only while it is queued, due and on one of queues",
       obj({"jobs": array(CLAIMED_RECORD, 1000)}),
       body=obj({"worker": WORKER_ID, "ids": array(JOB_ID, 1000), "queues": array(QUEUE, 100, 1),
                 "lease_ttl": TTL, "tasks": TASKS}, optional=("tasks",)),
       takes_now=True, errors=(422,), acts_for="worker"),
    Op("due_unclaimed", "POST", "/v1/due-unclaimed", W,
       "Queued, due jobs that no delivery seems to carry (for a transport's sweep to republish)",
       obj({"jobs": array(DUE_RECORD, 100_000)}),
       body=obj({"queues": array(QUEUE, 100, 1), "grace": number(0, 1e6), "limit": integer(1, 100_000)}),
       takes_now=True, errors=(422,)),
    Op("heartbeat", "POST", "/v1/heartbeat", W,
       "Renew every lease the worker holds in one statement; each job comes back renewed, lost or "
       "cancel_requested", obj({"beats": array(obj({"id": JOB_ID, "beat": {"type": "string",
                                                                          "enum": [str(b) for b in Beat]}}),
                                                  100_000)}),
       body=obj({"worker": WORKER_ID, "held": array(obj({"id": JOB_ID, "attempt": ATTEMPT}), 100_000),
                 "lease_ttl": TTL}),
       takes_now=True, acts_for="worker"),
    Op("progress", "POST", "/v1/progress", W, "Record progress (fenced) and renew the lease",
       obj({"cancel_requested": boolean()}),
       body=obj({"worker": WORKER_ID, "job_id": JOB_ID, "attempt": ATTEMPT,
                 "fraction": nullable(number(0, 1)), "message": nullable(string(10_000)), "lease_ttl": TTL}),
       takes_now=True, errors=(409,), acts_for="worker"),
    Op("complete", "POST", "/v1/complete", W,
       "Mark jobs succeeded (fenced); ids missing from accepted failed their fence",
       obj({"accepted": array(JOB_ID, 10_000)}),
       body=obj({"worker": WORKER_ID, "done": DONE}), takes_now=True, errors=(422,), acts_for="worker"),
    Op("complete_and_claim", "POST", "/v1/complete-and-claim", W,
       "A worker's round in one request: complete (fenced per row, as /v1/complete; ids missing from accepted "
       "failed their fence), then claim (as /v1/claim, long-polling with wait); the claim runs even when "
       "completions are refused",
       obj({"accepted": array(JOB_ID, 10_000), "jobs": array(CLAIMED_RECORD, 1000)}),
       body=obj({"worker": WORKER_ID, "done": DONE, "queues": array(QUEUE, 100, 1), "limit": integer(1, 1000),
                 "lease_ttl": TTL, "wait": number(0, MAX_CLAIM_WAIT), "tasks": TASKS}, optional=("wait", "tasks")),
       takes_now=True, errors=(422,), acts_for="worker"),
    Op("fail", "POST", "/v1/fail", W, "Report a failed attempt (fenced): retry with backoff, or dead",
       obj({"state": STATE}),
       body=obj({"worker": WORKER_ID, "job_id": JOB_ID, "attempt": ATTEMPT, "outcome": FAIL_OUTCOME,
                 "error": TEXT, "traceback": nullable(string(1_000_000)), "retry": boolean(),
                 "delay": nullable(number(0, 1e9))},
                optional=("traceback", "retry", "delay")),
       takes_now=True, errors=(409,), acts_for="worker"),
    Op("release", "POST", "/v1/release", W, "Hand a job back (fenced) without spending its budget",
       obj({"state": STATE}), body=obj({"worker": WORKER_ID, "job_id": JOB_ID, "attempt": ATTEMPT}),
       takes_now=True, errors=(409,), acts_for="worker"),
    # maintenance
    Op("reap", "POST", "/v1/reap", W, "Send up to limit lapsed leases down the retry-or-dead path",
       obj({"reaped": array(REAPED_RECORD, 100_000)}), body=obj({"limit": integer(1, 100_000)}), takes_now=True),
    Op("expire_leases", "POST", "/v1/expire-leases", W, "End the leases of provably dead workers now",
       obj({"expired": integer(0, 2**63 - 1)}), body=obj({"workers": array(WORKER_ID, 1000)}), takes_now=True,
       acts_for="workers"),
    Op("register_worker", "POST", "/v1/workers", W,
       "Register (or re-register) a worker; a worker token may then act for it, and no other worker token may",
       EMPTY,
       body=obj({"id": WORKER_ID, "host": string(255, 1), "pid": integer(0), "proc_start": nullable(
           integer(0, 2**62)), "queues": array(QUEUE, 100, 1), "concurrency": integer(1, 100_000),
           "tasks": TASKS}, optional=("tasks",)),
       acts_for="id"),
    Op("unknown_tasks", "GET", "/v1/unknown-tasks", ANY,
       "Due jobs by queue and task whose task no worker seen in the last `since` seconds knows",
       obj({"unknown": array(UNKNOWN_RECORD, 10**6)}), query={"since": integer(0, 10**9)}, takes_now=True),
    Op("bury_unknown", "POST", "/v1/bury-unknown", W,
       "End dead the jobs on queues, due for grace seconds, whose task no worker seen in that time knows",
       obj({"buried": array(BURIED_RECORD, 100_000)}),
       body=obj({"queues": array(QUEUE, 100, 1), "grace": number(0, 1e9), "limit": integer(1, 100_000)}),
       takes_now=True),
    Op("stop_worker", "POST", "/v1/workers/stop", W, "Mark a worker stopped", EMPTY,
       body=obj({"worker": WORKER_ID}), takes_now=True, acts_for="worker"),
    Op("list_workers", "GET", "/v1/workers", ANY, "Workers, optionally of one host or only live ones",
       obj({"workers": array(WORKER_RECORD, 100_000)}),
       query={"host": string(255), "live_only": boolean()}),
    Op("db_now", "GET", "/v1/now", ANY, "The database clock", obj({"now": DATETIME})),
    Op("check_schema", "GET", "/v1/schema", ANY, "Whether every migration has been applied (409 if not)",
       EMPTY, errors=(409,)),
    # schedules (I6)
    Op("sync_schedules", "POST", "/v1/schedules/sync", P,
       "Upsert an app's schedules; every other schedule is marked orphaned (kept, not deleted). Producer "
       "scope: a schedule makes jobs, as an enqueue does", EMPTY,
       body=obj({"schedules": array(SCHEDULE_SPEC, 10_000)}), takes_now=True, errors=(422,)),
    Op("fire_schedules", "POST", "/v1/schedules/fire", W,
       "Decide the due ticks of these schedules on the database clock: each becomes one job or is skipped; "
       "ticks another worker decided first are left out",
       obj({"fired": array(FIRED_RECORD, 10**6)}),
       body=obj({"names": array(TASK, 10_000), "grace": number(0, 1e6, exclusive_min=True)}), takes_now=True,
       errors=(422,)),
    Op("list_schedules", "GET", "/v1/schedules", ANY, "Every schedule, orphaned ones too, with its next tick",
       obj({"schedules": array(SCHEDULE_RECORD, 10**6)}), takes_now=True),
    # job control (issue 20)
    Op("prune", "POST", "/v1/prune", A,
       "Delete up to limit finished jobs (with their attempts), oldest first, older than their state's age in "
       "seconds; how many went, by state", obj({"pruned": PRUNED}),
       body=obj({"ages": AGES, "limit": integer(1, 100_000)}), takes_now=True, errors=(422,)),
    Op("prunable", "POST", "/v1/prunable", A, "How many finished jobs prune would delete, by state",
       obj({"pruned": PRUNED}), body=obj({"ages": AGES}), takes_now=True, errors=(422,)),
    Op("set_paused", "POST", "/v1/queues/pause", A,
       "Pause a queue (no claim takes its jobs from the next claim on; running jobs go on) or resume it",
       EMPTY, body=obj({"queue": QUEUE, "paused": boolean()}), takes_now=True, errors=(422,)),
    Op("paused_queues", "GET", "/v1/queues/paused", ANY, "The queues paused now",
       obj({"queues": array(string(1000), 100_000)})),
    # admin
    Op("migrate", "POST", "/v1/migrate", A, "Apply pending migrations", obj({"applied": array(string(1000))}),
       body=obj({})),
    Op("schema_objects", "GET", "/v1/schema/objects", A, "Tables, their columns, and indexes",
       obj({"objects": {"type": "object", "additionalProperties": array(string(1000), 10_000)}})),
    Op("integrity_check", "GET", "/v1/integrity", A, "Problems the database reports with its storage",
       obj({"problems": array(string(10**6), 10_000)})),
    Op("destroy", "POST", "/v1/destroy", A, "Drop every table tether created (irreversible)", EMPTY,
       body=obj({"confirm": {"type": "string", "enum": ["destroy"]}})),
]
OPS_BY_NAME = {op.name: op for op in OPS}


def request_schema(op: Op, *, client_clock: bool, max_wait: float = MAX_CLAIM_WAIT) -> Schema | None:
    """The body schema a server accepts: ``now`` only when it honours client
    clocks; a claim's ``wait`` up to the server's own cap."""
    if op.body is None:
        return None
    props = dict(op.body["properties"])
    if "wait" in props:
        props["wait"] = number(0, max_wait)
    if op.takes_now and client_clock:
        props["now"] = DATETIME
    return {**op.body, "properties": props}


def request_query(op: Op, *, client_clock: bool) -> dict[str, Schema]:
    """The query parameters a server accepts: a GET that takes ``now`` takes
    it here, and only when the server honours client clocks."""
    if op.takes_now and op.body is None and client_clock:
        return {**op.query, "now": DATETIME}
    return op.query


# -- errors -------------------------------------------------------------------------------
#: error code -> (HTTP status, the exception the client raises)
ERRORS: dict[str, tuple[int, type[TetherError]]] = {
    "stale_attempt": (409, StaleAttempt),
    "invalid_transition": (409, InvalidTransition),
    "schema_missing": (409, SchemaMissing),
    "job_not_found": (404, JobNotFound),
    "payload_error": (422, PayloadError),
    "unknown_task": (422, UnknownTask),
    "invalid_dsn": (422, InvalidDSN),
    "config_error": (422, ConfigError),
}


def error_code(exc: TetherError) -> str:
    """The wire code of one of tether's own errors (the most specific class wins)."""
    for cls in type(exc).__mro__:
        for code, (_, known) in ERRORS.items():
            if cls is known:
                return code
    return "config_error"


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
                   outcome=None if d["outcome"] is None else Outcome(d["outcome"]),
                   error=d["error"], traceback=d["traceback"])


def encode_job(j: Job) -> dict[str, Any]:
    return {
        "id": j.id, "queue": j.queue, "task": j.task, "args": j.args, "state": str(j.state), "priority": j.priority,
        "run_at": _dt(j.run_at), "attempt": j.attempt, "released": j.released, "max_attempts": j.max_attempts,
        "lease_ttl": j.lease_ttl, "timeout": j.timeout, "dedup_key": j.dedup_key, "locked_by": j.locked_by,
        "claimed_at": _dt(j.claimed_at), "lease_until": _dt(j.lease_until), "cancel_requested": j.cancel_requested,
        "progress": j.progress, "progress_message": j.progress_message, "result": j.result,
        "last_error": j.last_error, "created_at": _dt(j.created_at), "finished_at": _dt(j.finished_at),
        "meta": j.meta, "attempts": [encode_attempt(a) for a in j.attempts],
        "schedule": j.schedule, "scheduled_for": _dt(j.scheduled_for),
    }


def decode_job(d: dict[str, Any]) -> Job:
    return Job(
        id=d["id"], queue=d["queue"], task=d["task"], args=d["args"], state=JobState(d["state"]),
        priority=d["priority"], run_at=_req_dt(d["run_at"]), attempt=d["attempt"], released=d["released"],
        max_attempts=d["max_attempts"], lease_ttl=d["lease_ttl"], timeout=d["timeout"], dedup_key=d["dedup_key"],
        locked_by=d["locked_by"], claimed_at=_parse_dt(d["claimed_at"]), lease_until=_parse_dt(d["lease_until"]),
        cancel_requested=d["cancel_requested"], progress=d["progress"], progress_message=d["progress_message"],
        result=d["result"], last_error=d["last_error"], created_at=_req_dt(d["created_at"]),
        finished_at=_parse_dt(d["finished_at"]), meta=d["meta"],
        schedule=d.get("schedule"), scheduled_for=_parse_dt(d.get("scheduled_for")),
        attempts=[decode_attempt(a) for a in d["attempts"]],
    )


def encode_claimed(c: ClaimedJob) -> dict[str, Any]:
    return {"id": c.id, "attempt": c.attempt, "task": c.task, "args": c.args, "queue": c.queue,
            "priority": c.priority, "max_attempts": c.max_attempts, "lease_ttl": c.lease_ttl, "timeout": c.timeout,
            "claimed_at": _dt(c.claimed_at), "meta": c.meta, "run_at": _dt(c.run_at),
            "scheduled_for": _dt(c.scheduled_for)}


def decode_claimed(d: dict[str, Any]) -> ClaimedJob:
    return ClaimedJob(id=d["id"], attempt=d["attempt"], task=d["task"], args=d["args"], queue=d["queue"],
                      priority=d["priority"], max_attempts=d["max_attempts"], lease_ttl=d["lease_ttl"],
                      timeout=d["timeout"], claimed_at=_req_dt(d["claimed_at"]), meta=d["meta"],
                      run_at=_parse_dt(d["run_at"]), scheduled_for=_parse_dt(d.get("scheduled_for")))


def encode_reaped(r: Reaped) -> dict[str, Any]:
    return {"id": r.id, "attempt": r.attempt, "worker": r.worker, "outcome": str(r.outcome), "state": str(r.state),
            "queue": r.queue, "lease_until": _dt(r.lease_until)}


def decode_reaped(d: dict[str, Any]) -> Reaped:
    return Reaped(id=d["id"], attempt=d["attempt"], worker=d["worker"], outcome=Outcome(d["outcome"]),
                  state=JobState(d["state"]), queue=d["queue"], lease_until=_parse_dt(d["lease_until"]))


def encode_due(j: DueJob) -> dict[str, Any]:
    return {"id": j.id, "queue": j.queue, "attempt": j.attempt, "run_at": _dt(j.run_at)}


def decode_due(d: dict[str, Any]) -> DueJob:
    return DueJob(id=d["id"], queue=d["queue"], attempt=d["attempt"], run_at=_req_dt(d["run_at"]))


def encode_throughput(t: Throughput) -> dict[str, Any]:
    return {"start": _dt(t.start), "seconds": t.seconds, "counts": {str(o): n for o, n in t.counts.items()}}


def decode_throughput(d: dict[str, Any]) -> Throughput:
    return Throughput(start=_req_dt(d["start"]), seconds=d["seconds"],
                      counts={Outcome(o): n for o, n in d["counts"].items()})


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
    }


def decode_stats(d: dict[str, Any]) -> Stats:
    return Stats(
        counts={(c["queue"], c["state"]): c["count"] for c in d["counts"]},
        oldest_queued={q: _req_dt(t) for q, t in d["oldest_queued"].items()},
        workers=[decode_worker(w) for w in d["workers"]],
        now=_req_dt(d["now"]),
        unknown=[decode_unknown(u) for u in d.get("unknown", [])],
    )
