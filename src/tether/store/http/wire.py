"""The HTTP API's one description, shared by the server and the HTTP store:
every operation (method, path, scope, request and response schema), the JSON
form of every record, and the error codes with their HTTP statuses.

The server builds its routes, its request validation and ``/openapi.json``
from ``OPS``; the client builds its requests from the same table, so the three
cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...config import MAX_DELAY
from ...cron import MAX_CATCH_UP
from ...model import (
    TERMINAL_STATES,
    Beat,
    JobState,
    Outcome,
)
from ...payload import MAX_ERROR_CHARS, MAX_KEY_BYTES, MAX_TRACEBACK_CHARS
from ..buckets import MAX_BUCKET_SECONDS, MAX_BUCKETS
from ..columns import INSERTED, READ, Column
from .records import (
    CLAIMED_FIELDS,
    decode_attempt,
    decode_claimed,
    decode_claimed_answer,
    decode_due,
    decode_job,
    decode_new_job,
    decode_reaped,
    decode_stats,
    decode_throughput,
    decode_worker,
    encode_attempt,
    encode_claimed,
    encode_claimed_all,
    encode_claimed_rows,
    encode_due,
    encode_job,
    encode_new_job,
    encode_reaped,
    encode_stats,
    encode_throughput,
    encode_worker,
)
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
from .wire_errors import ERRORS, error_code
from .wire_flows import flow_ops, with_flows
from .wire_limits import key_limit_ops
from .wire_many import CANCEL_ANSWER, CANCEL_BODY, FILTER, SEARCH_BODY, TAGS, search_answer
from .wire_schedules import FIRE_BODY, control_ops, with_control, with_task
from .wire_unknown import BURIED_RECORD, TASK_NAME, TASKS, UNKNOWN_RECORD

__all__ = [
    "CLAIMED_FIELDS",
    "CLAIMING",
    "ERRORS",
    "OPS",
    "ROWS_HEADER",
    "SCOPES",
    "Op",
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
    "error_code",
    "request_query",
    "request_schema",
]

SCOPES = ("worker", "producer", "admin")
MAX_CLAIM_WAIT = 30.0
#: the most workers one workers_page answer lists
WORKERS_PAGE_MAX = 1000

# -- field schemas ------------------------------------------------------------------
JOB_ID = integer(1, INT53_MAX)
ATTEMPT = integer(0)
WORKER_ID = string(200, 1)
QUEUE = string(63, 1, "^[A-Za-z0-9_][A-Za-z0-9_.\\-]{0,62}$")  # config.validate_queue
TASK = TASK_NAME  # naming.validate_task_name
TTL = number(0, 1e6, exclusive_min=True)
STATE = {"type": "string", "enum": [str(s) for s in JobState]}
OUTCOME = {"type": "string", "enum": [str(o) for o in Outcome]}
#: what a fail report may say: every outcome but the two with operations of their own (complete, release)
FAIL_OUTCOME = {"type": "string", "enum": [str(o) for o in Outcome if o not in (Outcome.SUCCEEDED, Outcome.RELEASED)]}
#: an outcome in a record the server sends: a newer server may know outcomes
#: this client does not (records.py reads them with Outcome.read), so no enum
OUTCOME_SENT = {"type": "string", "maxLength": 100, "description": "one of " + ", ".join(str(o) for o in Outcome)
                + ", or one a newer server knows"}
JSON_OBJECT: Schema = {"type": "object"}
TEXT = string(MAX_ERROR_CHARS)

ATTEMPT_RECORD = obj({
    "job_id": JOB_ID, "attempt": ATTEMPT, "worker": string(1000), "claimed_at": DATETIME,
    "finished_at": nullable(DATETIME), "outcome": nullable(OUTCOME_SENT), "error": nullable(string(10**7)),
    "traceback": nullable(string(10**7)),
})
#: the job record's fields with bounds of their own; a declared column not
#: named here (store/columns.py: READ) gets its type's (_by_type)
_JOB_FIELDS: dict[str, Schema] = {
    "id": JOB_ID, "queue": string(1000), "task": string(1000), "args": ANY_JSON, "state": STATE,
    "priority": integer(-(2**31), 2**31 - 1), "run_at": DATETIME, "attempt": ATTEMPT, "released": ATTEMPT,
    "max_attempts": ATTEMPT, "lease_ttl": nullable({"type": "number"}), "timeout": nullable({"type": "number"}),
    "dedup_key": nullable(string(10**6)), "locked_by": nullable(string(1000)), "claimed_at": nullable(DATETIME),
    "lease_until": nullable(DATETIME), "cancel_requested": boolean(), "progress": nullable({"type": "number"}),
    "progress_message": nullable(string(10**7)), "result": ANY_JSON, "last_error": nullable(string(10**7)),
    "created_at": DATETIME, "finished_at": nullable(DATETIME), "meta": ANY_JSON,
    "schedule": nullable(string(1000)), "scheduled_for": nullable(DATETIME),
    "exclusive_key": nullable(string(MAX_KEY_BYTES, 1)), "limit_key": nullable(string(MAX_KEY_BYTES, 1)),
}


def _by_type(c: Column) -> Schema:
    """A declared column's schema when no bounds of its own are given: by its kind and type, None allowed."""
    if c.kind == "json":
        return ANY_JSON
    if c.kind == "time":
        return nullable(DATETIME)
    if c.kind == "flag":
        return nullable(boolean())
    if c.pg in ("integer", "bigint"):
        return nullable(integer(-(2**63), 2**63 - 1))
    if c.pg == "double precision":
        return nullable({"type": "number"})
    return nullable(string(10**7))


JOB_RECORD = obj(
    {**{c.wire: _JOB_FIELDS.get(c.wire) or _by_type(c) for c in READ}, "attempts": array(ATTEMPT_RECORD, 10**6),
     "older_attempts": integer(0, 2**63 - 1)},
    # older servers do not send them
    optional=(*(c.wire for c in READ if c.wire_optional), "older_attempts"),
)
CLAIMED_RECORD = obj({
    "id": JOB_ID, "attempt": ATTEMPT, "task": string(1000), "args": ANY_JSON, "queue": string(1000),
    "priority": integer(-(2**31), 2**31 - 1), "max_attempts": ATTEMPT, "lease_ttl": {"type": "number"},
    "timeout": nullable({"type": "number"}), "claimed_at": DATETIME, "meta": ANY_JSON, "run_at": nullable(DATETIME),
    "scheduled_for": nullable(DATETIME), "trace": nullable(JSON_OBJECT),
}, optional=("scheduled_for", "trace"))  # optional: servers older than schedules, or than trace, do not send them
REAPED_RECORD = obj({"id": JOB_ID, "attempt": ATTEMPT, "worker": string(1000), "outcome": OUTCOME_SENT,
                     "state": STATE, "queue": string(1000), "lease_until": nullable(DATETIME)})
#: a request header: with the value ``rows``, an answer carrying claimed jobs
#: writes them as ``fields`` and ``rows`` (``encode_claimed_rows``), not as
#: ``jobs`` records. A header, not a body field: an older server ignores it
#: (and answers records), where it would refuse an unknown field.
ROWS_HEADER = "X-Tether-Claims"
#: the fields of an answer carrying claimed jobs: ``jobs`` (records), or
#: ``fields`` and ``rows`` (ROWS_HEADER); all optional, as either form is
CLAIMED_ANSWER = {"jobs": array(CLAIMED_RECORD, 1000), "fields": array(string(100), 100),
                  "rows": array(array(ANY_JSON, 100), 1000)}
CLAIMED_FORMS = tuple(CLAIMED_ANSWER)
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
    "workers_total": integer(0, 2**63 - 1),
}, optional=("unknown", "workers_total"))
THROUGHPUT_RECORD = obj({
    "start": DATETIME, "seconds": integer(1, MAX_BUCKET_SECONDS),
    # by outcome: this release's, and any a newer server adds (optional: an older server lacks some)
    "counts": {**obj({str(o): integer(0, 2**63 - 1) for o in Outcome}, optional=tuple(str(o) for o in Outcome)),
               "additionalProperties": integer(0, 2**63 - 1)},
})
LIMITS_RECORD = obj({
    "queue": string(1000), "concurrency": nullable(integer(1, 2**31 - 1)),
    "rate_limit": nullable(integer(1, 2**31 - 1)), "rate_period": nullable({"type": "number"}),
    "running": integer(0, 2**63 - 1), "started": integer(0, 2**63 - 1),
})
#: an enqueue request's fields with bounds of their own; a declared column an
#: enqueue writes (store/columns.py: INSERTED) not named here gets its type's
_NEW_JOB_FIELDS: dict[str, Schema] = {
    "task": TASK, "args": JSON_OBJECT, "queue": QUEUE, "priority": integer(-(2**31) + 1, 2**31 - 1),
    "run_at": nullable(DATETIME), "delay": number(0, MAX_DELAY), "max_attempts": integer(1),
    "lease_ttl": nullable(TTL), "timeout": nullable(TTL), "backoff_base": number(0, 1e6),
    "dedup_key": nullable(string(MAX_KEY_BYTES, 1)), "meta": nullable(JSON_OBJECT),
    "exclusive_key": nullable(string(MAX_KEY_BYTES, 1)),  # bytes are checked by the server (check_key)
    "limit_key": nullable(string(MAX_KEY_BYTES, 1)),
    "trace": nullable(JSON_OBJECT), "tags": nullable(TAGS),
    "dedup_for": nullable(number(0, 1e10)), "expires_at": nullable(DATETIME),
}
NEW_JOB = obj(
    {**{c.wire: _NEW_JOB_FIELDS.get(c.wire) or _by_type(c) for c in INSERTED},
     "run_at": _NEW_JOB_FIELDS["run_at"], "delay": _NEW_JOB_FIELDS["delay"]},
    optional=tuple(k for k in (*(c.wire for c in INSERTED), "run_at", "delay") if k not in ("task", "args")),
)
# schedules (I6); records encoded by wire_schedules.py
SCHEDULE_SPEC = obj({
    "name": TASK, "cron": string(200, 1), "timezone": string(100, 1), "args": JSON_OBJECT, "queue": QUEUE,
    "catch_up": integer(0, MAX_CATCH_UP), "overlap": boolean(), "priority": integer(-(2**31) + 1, 2**31 - 1),
    "max_attempts": integer(1, 2**31 - 1), "lease_ttl": nullable(TTL), "timeout": nullable(TTL),
    "backoff_base": number(0, 1e6),
})
SCHEDULE_RECORD = with_control(obj({
    "name": string(1000), "cron": string(1000), "timezone": string(1000), "args": ANY_JSON, "queue": string(1000),
    "catch_up": integer(0), "overlap": boolean(), "since": nullable(DATETIME), "next_tick": nullable(DATETIME),
    "last_tick": nullable(DATETIME), "last_fired": nullable(DATETIME), "last_job_id": nullable(JOB_ID),
    "skipped": integer(0), "orphaned": boolean(), "last_seen": nullable(DATETIME),
}))
FIRED_RECORD = with_task(obj({"schedule": string(1000), "tick": DATETIME, "job_id": nullable(JOB_ID),
                              "queue": string(1000)}))
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

#: a bulk action's batch: how many, and the next `after` (null: done)
_BATCH = obj({"count": integer(0, 2**63 - 1), "last": nullable(JOB_ID)})
OPS: list[Op] = [
    # producers
    Op("enqueue", "POST", "/v1/jobs", P, "Enqueue jobs (one or many, in one statement); ids in input order",
       # duplicates: the positions (in ids) of dedup hits, left out when none (an older server sends none)
       obj({"ids": array(JOB_ID, 10_000), "duplicates": array(integer(0, 9_999), 10_000)}, optional=("duplicates",)),
       body=obj({"jobs": array(NEW_JOB, 10_000)}), takes_now=True,
       errors=(422,)),
    Op("get_job", "GET", "/v1/jobs/{job_id}", ANY, "One job with its attempts history", JOB_RECORD,
       errors=(404,)),
    Op("list_jobs", "GET", "/v1/jobs", P, "Jobs, newest first", obj({"jobs": array(JOB_RECORD, 10_000)}),
       query={"state": STATE, "queue": string(1000), "task": string(1000), "limit": integer(1, 10_000)}),
    # finding and acting on many jobs (issue 43): the filters of app.jobs(), same names (wire_many.FILTER)
    Op("search_jobs", "POST", "/v1/jobs/search", P, "Jobs matching the filter, newest first; keyset paging: "
       "leave out `before` and pass the answer's `next` as `after` for the next page (a cursor another filter "
       "made is refused, 400), or give `before`, a job id, for the jobs below it",
       search_answer(JOB_RECORD), body=SEARCH_BODY, errors=(422,)),
    Op("count_jobs", "POST", "/v1/jobs/count", P, "How many jobs match the filter",
       obj({"count": integer(0, 2**63 - 1)}), body=obj({"filter": FILTER}), errors=(422,)),
    Op("cancel_many", "POST", "/v1/jobs/cancel-many", P, "Cancel a batch of the matching jobs above `after` "
       "(id order): queued at once, running by request; how many, and the next `after` (null: done); with "
       "`ended`, the jobs cancelled at once", CANCEL_ANSWER, body=CANCEL_BODY, takes_now=True, errors=(422,)),
    Op("retry_many", "POST", "/v1/jobs/retry-many", P, "Retry a batch of the matching dead or cancelled jobs "
       "above `after`; the (id, queue) of each retried, and the next `after`",
       obj({"jobs": array(obj({"id": JOB_ID, "queue": string(1000)}), 10_000), "last": nullable(JOB_ID)}),
       body=obj({"filter": FILTER, "after": integer(0, INT53_MAX), "limit": integer(1, 10_000)}), takes_now=True,
       errors=(422,)),
    Op("delete_many", "POST", "/v1/jobs/delete-many", A, "Delete a batch of the matching finished jobs above "
       "`after`", _BATCH, body=obj({"filter": FILTER, "after": integer(0, INT53_MAX), "limit": integer(1, 10_000)}),
       errors=(422,)),
    Op("rerun", "POST", "/v1/jobs/{job_id}/rerun", P, "A new job copied from a finished one; its id",
       obj({"id": JOB_ID}), body=obj({}), takes_now=True, errors=(404, 409)),
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
       "Claim up to limit due jobs; with wait > 0, hold the request until jobs arrive or wait seconds pass. "
       f"The jobs come as records (jobs), or as fields and rows when the request carries {ROWS_HEADER}: rows",
       obj(CLAIMED_ANSWER, optional=CLAIMED_FORMS),
       body=obj({"worker": WORKER_ID, "queues": array(QUEUE, 100, 1), "limit": integer(1, 1000), "lease_ttl": TTL,
                 "wait": number(0, MAX_CLAIM_WAIT), "tasks": TASKS}, optional=("wait", "tasks")),
       takes_now=True, errors=(422,), acts_for="worker"),
    Op("claim_ids", "POST", "/v1/claim-ids", W,
       "Claim these jobs (ids a transport delivered), each only while it is queued, due and on one of queues; "
       "the jobs in either form, as /v1/claim",
       obj(CLAIMED_ANSWER, optional=CLAIMED_FORMS),
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
       "completions are refused; the jobs in either form, as /v1/claim",
       obj({"accepted": array(JOB_ID, 10_000), **CLAIMED_ANSWER}, optional=CLAIMED_FORMS),
       body=obj({"worker": WORKER_ID, "done": DONE, "queues": array(QUEUE, 100, 1), "limit": integer(1, 1000),
                 "lease_ttl": TTL, "wait": number(0, MAX_CLAIM_WAIT), "tasks": TASKS}, optional=("wait", "tasks")),
       takes_now=True, errors=(422,), acts_for="worker"),
    Op("fail", "POST", "/v1/fail", W, "Report a failed attempt (fenced): retry with backoff, or dead",
       obj({"state": STATE}),
       body=obj({"worker": WORKER_ID, "job_id": JOB_ID, "attempt": ATTEMPT, "outcome": FAIL_OUTCOME,
                 "error": TEXT, "traceback": nullable(string(MAX_TRACEBACK_CHARS)), "retry": boolean(),
                 "delay": nullable(number(0, MAX_DELAY))},
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
       acts_for="id", errors=(422,)),
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
    Op("workers_page", "GET", "/v1/workers/page", ANY,
       "One page of workers, those not stopped first, the most recently seen first",
       obj({"workers": array(WORKER_RECORD, WORKERS_PAGE_MAX)}),
       query={"limit": integer(1, WORKERS_PAGE_MAX), "offset": integer(0, 2**31 - 1), "live_only": boolean(),
              "host": string(255)}),
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
       obj({"fired": array(FIRED_RECORD, 10**6)}), body=FIRE_BODY, takes_now=True, errors=(422,)),
    Op("list_schedules", "GET", "/v1/schedules", ANY, "Every schedule, orphaned ones too, with its next tick",
       obj({"schedules": array(SCHEDULE_RECORD, 10**6)}), takes_now=True),
    *(Op(**kw) for kw in control_ops(SCHEDULE_SPEC, FIRED_RECORD)),  # managed at run time (issue 44)
    *(Op(**kw) for kw in flow_ops(NEW_JOB, JOB_ID)),  # workflows and batches (issue 42)
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
    Op("set_limits", "POST", "/v1/queues/limits", A,
       "Set a queue's limits whole (null lifts one): at most `concurrency` of its jobs running at once, at most "
       "`rate.count` started in any `rate.period` seconds; every claim from the next on obeys them",
       EMPTY, body=obj({"queue": QUEUE, "concurrency": nullable(integer(1, 2**31 - 1)),
                        "rate": nullable(obj({"count": integer(1, 2**31 - 1),
                                              "period": number(0, 1e8, exclusive_min=True)}))}),
       takes_now=True, errors=(422,)),
    Op("queue_limits", "POST", "/v1/queues/limits/read", ANY,
       "Every queue with a limit, with its running jobs and its starts in the rate window",
       obj({"limits": array(LIMITS_RECORD, 100_000)}), body=obj({}), takes_now=True),
    *(Op(**kw) for kw in key_limit_ops()),  # per-key limits (issue 44)
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
OPS = [replace(op, response=with_flows(op.name, op.response)) for op in OPS]  # (wire_flows.FLOW_REPORTS)
OPS_BY_NAME = {op.name: op for op in OPS}
#: the operations whose answers carry claimed jobs, in the form ROWS_HEADER picks
CLAIMING = frozenset(op.name for op in OPS if "rows" in op.response.get("properties", {}))


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
