"""The HTTP API over a Store: a Starlette app built from ``wire.OPS``.

Every request needs a bearer token whose scopes cover the operation. Bodies
are JSON, capped in size, and validated against the schema published at
``/openapi.json`` before the store sees them. The store's own fenced
operations do the work, so a stale report is refused exactly as it is for a
local worker (409 ``stale_attempt``). tether's errors map to 4xx; anything
else is a 500 whose details stay in the server's log.

A worker token acts only for the workers it registered (``owners``): any
worker operation naming another id is refused with 403 ``not_your_worker``.

A client-supplied ``now`` (the store's test clock) is honoured only when the
app is built with ``client_clock=True``; otherwise it is refused.

Built with a delivering ``transport`` (NATS), the server announces the jobs
that enqueue and retry make queued and due, after the store has committed
them, as an app's own enqueue and retry do; its producers need no link to NATS.

Built with ``services`` (``tether server``: the pruner, for its ``--retention``),
it runs each on its timer while it serves (``duties``): the database's own
upkeep, done where its credentials are.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..config import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_SERVER_ROUND_CONNECTIONS, validate_queue
from ..errors import ConfigError, JobNotFound, PayloadError, StaleAttempt, TetherError
from ..model import LIVE_WITHIN, ClaimedJob, JobState, Outcome, QueueLimits
from ..payload import dump_json
from ..store import Listener, Store
from ..store.http import wire, wire_unknown
from ..store.worker_rows import WORKERS_PAGE
from ..transport import Transport, announce, due_now
from ..worker.service import PeriodicService
from . import schedules, workers
from .auth import Caller, TokenTable, identify
from .duties import Duties
from .openapi import build_document
from .owners import WorkerOwners
from .requests import ApiError, Args, arguments, client_gone
from .throttle import Throttle
from .workers import WorkerPolicy

__all__ = ["DEFAULT_MAX_BODY", "create_app"]

log = logging.getLogger("tether.server")

DEFAULT_MAX_BODY = 8 * 1024 * 1024
#: while a claim long-polls, how often it looks again without a wake-up
LONG_POLL_TICK = 0.2
#: a claiming request's argument: whether its answer carries the jobs as rows (``wire.ROWS_HEADER``)
ROWS = "answer_rows"


class _Wakeups:
    """Wakes long-polling claims when jobs may have become due."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self) -> None:
        self._loop = asyncio.get_running_loop()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    def notify_threadsafe(self, _queue: str = "*") -> None:
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self.notify)

    async def wait(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)


@dataclass
class _Server:
    store: Store
    tokens: TokenTable
    client_clock: bool
    max_body: int
    max_payload: int
    max_wait: float
    #: announces what enqueue and retry committed (None: nothing to announce to)
    transport: Transport | None = None
    #: failed bearer tokens, by client address
    throttle: Throttle = field(default_factory=Throttle)
    workers: WorkerPolicy = field(default_factory=WorkerPolicy)
    wakeups: _Wakeups = field(default_factory=_Wakeups)
    owners: WorkerOwners = field(init=False)

    def __post_init__(self) -> None:
        self.owners = WorkerOwners(self.store)




# -- the operations ----------------------------------------------------------------------
def _enqueue(s: _Server, a: Args) -> Args:
    jobs = [wire.decode_new_job(j, s.max_payload) for j in a["jobs"]]
    ids = s.store.enqueue(jobs, now=a["now"])
    if s.transport is not None and s.transport.delivers:  # committed: announce it (never raises)
        announce(s.transport, due_now(jobs, ids))
    return {"ids": ids}


def _retry(s: _Server, a: Args) -> Args:
    queue = s.store.retry(a["job_id"], now=a["now"])
    if s.transport is not None:
        announce(s.transport, [(a["job_id"], queue)], retry=True)
    return {"queue": queue}


def _limits(a: Args) -> QueueLimits:
    """set_limits' body as the store takes it (JSON's 5.0 is the integer 5 here)."""
    rate = a["rate"]
    return QueueLimits(a["queue"], None if a["concurrency"] is None else int(a["concurrency"]),
                       None if rate is None else int(rate["count"]), None if rate is None else float(rate["period"]))


def _get_job(s: _Server, a: Args) -> Args:
    job = s.store.get_job(a["job_id"])
    if job is None:
        raise JobNotFound(f"no job {a['job_id']}")
    return wire.encode_job(job)


def _list_jobs(s: _Server, a: Args) -> Args:
    jobs = s.store.list_jobs(state=a.get("state"), queue=a.get("queue"), task=a.get("task"),
                             limit=a.get("limit", 50))
    return {"jobs": [wire.encode_job(j) for j in jobs]}


# A worker's round is awaited on the server's event loop (``Store.claim_async``
# and the rest): PostgreSQL sends its statement from the loop itself, with no
# hop to a thread and back, which took about half a round's time on the server.
async def _claim_once(s: _Server, a: Args) -> list[ClaimedJob]:
    queues = [validate_queue(q) for q in a["queues"]]
    return await s.store.claim_async(a["worker"], queues, a["limit"], a["lease_ttl"], now=a["now"],
                                     tasks=a.get("tasks"))


async def _claim_first(s: _Server, a: Args) -> tuple[Args, list[ClaimedJob]]:
    return {}, await _claim_once(s, a)


async def _complete_and_claim_first(s: _Server, a: Args) -> tuple[Args, list[ClaimedJob]]:
    # Every argument is checked before the store writes anything: a bad result
    # or queue refuses the whole request, completions included.
    rows, queues = _done_rows(s, a), [validate_queue(q) for q in a["queues"]]
    accepted, jobs = await s.store.complete_and_claim_async(a["worker"], rows, queues, a["limit"], a["lease_ttl"],
                                                            now=a["now"], tasks=a.get("tasks"))
    return {"accepted": sorted(accepted)}, jobs


async def _claim_ids(s: _Server, a: Args) -> Args:
    queues = [validate_queue(q) for q in a["queues"]]
    jobs = await s.store.claim_ids_async(a["worker"], a["ids"], queues, a["lease_ttl"], now=a["now"],
                                         tasks=a.get("tasks"))
    return _claimed(a, jobs)


def _claimed(a: Args, jobs: list[ClaimedJob]) -> Args:
    """A claim's jobs, as the request asked (``wire.ROWS_HEADER``: rows) or as records."""
    return wire.encode_claimed_rows(jobs) if a.get(ROWS) else {"jobs": wire.encode_claimed_all(jobs)}


def _due_unclaimed(s: _Server, a: Args) -> Args:
    queues = [validate_queue(q) for q in a["queues"]]
    jobs = s.store.due_unclaimed(queues, grace=a["grace"], limit=a["limit"], now=a["now"])
    return {"jobs": [wire.encode_due(j) for j in jobs]}


def _recent_attempts(s: _Server, a: Args) -> Args:
    try:
        outcomes = [Outcome(o) for o in a["outcomes"].split(",")] if "outcomes" in a else list(Outcome)
    except ValueError as exc:
        raise PayloadError(f"outcomes: {exc}") from None
    return {"attempts": [wire.encode_attempt(x) for x in s.store.recent_attempts(outcomes, limit=a.get("limit", 50))]}


def _throughput(s: _Server, a: Args) -> Args:
    found = s.store.throughput(buckets=a.get("buckets", 60), bucket_seconds=a.get("bucket_seconds", 60),
                               now=a["now"])
    return {"buckets": [wire.encode_throughput(t) for t in found]}


def _done_rows(s: _Server, a: Args) -> list[tuple[int, int, str | None]]:
    return [(r["id"], r["attempt"], dump_json(r["result"], "result", s.max_payload) if "result" in r else None)
            for r in a["done"]]


async def _complete(s: _Server, a: Args) -> Args:
    return {"accepted": sorted(await s.store.complete_async(a["worker"], _done_rows(s, a), now=a["now"]))}


def _fail(s: _Server, a: Args) -> Args:
    state = s.store.fail(a["worker"], a["job_id"], a["attempt"], outcome=Outcome(a["outcome"]), error=a["error"],
                         traceback=a.get("traceback"), retry=a.get("retry", True), now=a["now"],
                         delay=a.get("delay"))
    return {"state": str(state)}


def _destroy(s: _Server, a: Args) -> Args:
    s.store.destroy()
    s.owners.forget()
    return {}


def _ages(a: Args) -> dict[JobState, float]:
    return {JobState(k): v for k, v in a["ages"].items()}


def _counts(found: dict[JobState, int]) -> Args:
    return {str(k): v for k, v in found.items()}


#: every operation but those that long-poll (``LONG_POLLS``)
HANDLERS: dict[str, Callable[[_Server, Args], Args]] = {
    "enqueue": _enqueue,
    "get_job": _get_job,
    "list_jobs": _list_jobs,
    "cancel": lambda s, a: {"state": str(s.store.cancel(a["job_id"], now=a["now"]))},
    "retry": _retry,
    "stats": lambda s, a: wire.encode_stats(s.store.stats()),
    "recent_attempts": _recent_attempts,
    "throughput": _throughput,
    "due_unclaimed": _due_unclaimed,
    "heartbeat": lambda s, a: {"beats": [
        {"id": i, "beat": str(b)} for i, b in sorted(s.store.heartbeat(
            a["worker"], [(h["id"], h["attempt"]) for h in a["held"]], a["lease_ttl"], now=a["now"]).items())]},
    "progress": lambda s, a: {"cancel_requested": s.store.progress(
        a["worker"], a["job_id"], a["attempt"], a["fraction"], a["message"], a["lease_ttl"], now=a["now"])},
    "fail": _fail,
    "release": lambda s, a: {"state": str(s.store.release(a["worker"], a["job_id"], a["attempt"], now=a["now"]))},
    "reap": lambda s, a: {"reaped": [wire.encode_reaped(r) for r in s.store.reap(a["limit"], now=a["now"])]},
    "expire_leases": lambda s, a: {"expired": s.store.lapse_leases(a["workers"], now=a["now"])},
    "register_worker": lambda s, a: workers.register(s.store, s.owners, s.workers, a),
    "unknown_tasks": lambda s, a: {"unknown": [wire_unknown.encode_unknown(u) for u in s.store.unknown_tasks(
        since=a.get("since", LIVE_WITHIN), now=a["now"])]},
    "bury_unknown": lambda s, a: workers.bury_unknown(s.store, s.workers, a),
    "stop_worker": lambda s, a: s.store.stop_worker(a["worker"], now=a["now"]) or {},
    "list_workers": lambda s, a: {"workers": [wire.encode_worker(w) for w in s.store.list_workers(
        host=a.get("host"), live_only=a.get("live_only", False))]},
    "workers_page": lambda s, a: {"workers": [wire.encode_worker(w) for w in s.store.workers_page(
        limit=a.get("limit", WORKERS_PAGE), offset=a.get("offset", 0), live_only=a.get("live_only", False),
        host=a.get("host"))]},
    "db_now": lambda s, a: {"now": s.store.db_now().isoformat()},
    "check_schema": lambda s, a: s.store.check_schema() or {},
    "prune": lambda s, a: {"pruned": _counts(s.store.prune(_ages(a), a["limit"], now=a["now"]))},
    "set_paused": lambda s, a: s.store.set_paused(a["queue"], a["paused"], now=a["now"]) or {},
    "paused_queues": lambda s, a: {"queues": s.store.paused_queues()},
    "set_limits": lambda s, a: s.store.set_limits(_limits(a), now=a["now"]) or {},
    "queue_limits": lambda s, a: {"limits": [dataclasses.asdict(q) for q in s.store.queue_limits(now=a["now"])]},
    "prunable": lambda s, a: {"pruned": _counts(s.store.prunable(_ages(a), now=a["now"]))},
    "migrate": lambda s, a: {"applied": s.store.migrate()},
    "schema_objects": lambda s, a: {"objects": s.store.schema_objects()},
    "integrity_check": lambda s, a: {"problems": s.store.integrity_check()},
    "destroy": _destroy,
    "sync_schedules": lambda s, a: schedules.sync_schedules(s.store, a, s.max_payload),
    "fire_schedules": lambda s, a: schedules.fire_schedules(s.store, s.transport, a),
    "list_schedules": lambda s, a: schedules.list_schedules(s.store, a),
}
#: a worker's round but for its claims: awaited on the event loop
ROUNDS: dict[str, Callable[[_Server, Args], Awaitable[Args]]] = {
    "claim_ids": _claim_ids,
    "complete": _complete,
}
#: operations that end in a claim, which may long-poll (``_long_poll``): their
#: first step, which returns the rest of the answer and the jobs claimed
LONG_POLLS: dict[str, Callable[[_Server, Args], Awaitable[tuple[Args, list[ClaimedJob]]]]] = {
    "claim": _claim_first,
    "complete_and_claim": _complete_and_claim_first,
}
#: operations after which queued jobs may be due: wake long-polling claims
WAKES = frozenset({"enqueue", "retry", "fail", "release", "reap", "expire_leases", "fire_schedules", "set_paused",
                   "set_limits"})


#: the routes tried first (see create_app)
ROUND_FIRST = frozenset({"complete_and_claim", "claim", "complete", "heartbeat", "claim_ids"})

#: operations that bind their worker to the token (checked after they ran)
BINDS = frozenset({"register_worker"})


# -- request handling -------------------------------------------------------------------------
def _authorize(s: _Server, request: Request, op: wire.Op) -> Caller:
    caller = identify(s.tokens, s.throttle, request)
    if not s.tokens.allows(caller.scopes, op.scopes):
        needed = [*op.scopes, *(() if "admin" in op.scopes else ("admin",))]  # admin grants everything
        raise ApiError(403, "forbidden", f"{op.name} needs a token with scope {' or '.join(needed)}; "
                                         f"this token has {', '.join(sorted(caller.scopes))}")
    return caller


async def _authorize_workers(s: _Server, op: wire.Op, caller: Caller, args: Args) -> None:
    """A worker token acts only for the workers it registered; admin for any.
    Sets ``owner`` for the handlers: the token's fingerprint, None for admin."""
    args["owner"] = None if caller.is_admin else caller.fingerprint
    if op.acts_for is None or op.name in BINDS or caller.is_admin:
        return
    named = args[op.acts_for]
    ids: list[str] = named if isinstance(named, list) else [named]
    if not s.owners.cached(caller.fingerprint, ids):  # a worker's first request: ask the database
        await run_in_threadpool(workers.check_owner, s.owners, caller.fingerprint, ids)


def _error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None,
                    **extra: Any) -> JSONResponse:
    return JSONResponse({"error": code, "message": message, **extra}, status_code=status, headers=headers)


def _endpoint(s: _Server, op: wire.Op) -> Callable[[Request], Any]:
    handler, first, round_ = HANDLERS.get(op.name), LONG_POLLS.get(op.name), ROUNDS.get(op.name)
    assert [handler, first, round_].count(None) == 2, f"{op.name}: one handler, plain, a round or long-polling"

    async def endpoint(request: Request) -> Response:
        try:
            caller = _authorize(s, request, op)
            args = await arguments(request, op, client_clock=s.client_clock, max_body=s.max_body,
                                   max_wait=s.max_wait)
            await _authorize_workers(s, op, caller, args)
            if op.name in wire.CLAIMING:
                args[ROWS] = request.headers.get(wire.ROWS_HEADER) == "rows"
            if first is not None:
                result: Args = await _long_poll(s, request, args, first)
            elif round_ is not None:
                result = await round_(s, args)
            else:
                assert handler is not None
                result = await run_in_threadpool(handler, s, args)
            if op.name in WAKES:
                s.wakeups.notify()
            return JSONResponse(result)
        except ApiError as exc:
            return _error_response(exc.status, exc.code, exc.message, exc.headers, **exc.extra)
        except StaleAttempt as exc:
            return _error_response(409, "stale_attempt", str(exc), job_id=exc.job_id, attempt=exc.attempt,
                                   worker=exc.worker, op=exc.op)
        except TetherError as exc:
            code = wire.error_code(exc)
            return _error_response(wire.ERRORS[code][0], code, str(exc))
        except ClientDisconnect:  # gone mid-upload: no one to answer, nothing failed here
            client_gone(log, request, op.name)
            return Response(status_code=400)
        except Exception as exc:
            unavailable = isinstance(exc, OSError) or type(exc).__name__ in ("OperationalError", "PoolTimeout")
            log.exception("%s failed", op.name)
            if unavailable:
                return _error_response(503, "database_unavailable",
                                       f"the database did not answer ({type(exc).__name__}); try again")
            return _error_response(500, "internal", f"{op.name} failed on the server ({type(exc).__name__}); "
                                                    "the details are in the server's log")

    endpoint.__name__ = op.name
    return endpoint


async def _long_poll(s: _Server, request: Request, args: Args,
                     first: Callable[[_Server, Args], Awaitable[tuple[Args, list[ClaimedJob]]]]) -> Args:
    """``first`` (a claim, or completions and a claim), then, with ``wait``,
    claims alone until jobs are due or the wait ends: whatever ``first`` wrote
    is written once, and its answer waits for the jobs."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + float(args.get("wait", 0.0))
    answer, jobs = await first(s, args)
    while not jobs and args["now"] is None:
        left = deadline - loop.time()
        if left <= 0 or await request.is_disconnected():
            break
        await s.wakeups.wait(min(LONG_POLL_TICK, left))
        jobs = await _claim_once(s, args)
    return {**answer, **_claimed(args, jobs)}


def create_app(
    store: Store,
    tokens: TokenTable,
    *,
    client_clock: bool = False,
    max_body: int = DEFAULT_MAX_BODY,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    max_claim_wait: float = wire.MAX_CLAIM_WAIT,
    transport: Transport | None = None,
    services: Sequence[PeriodicService] = (),
    round_connections: int = DEFAULT_SERVER_ROUND_CONNECTIONS,
    throttle: Throttle | None = None,
    worker_policy: WorkerPolicy | None = None,
) -> Starlette:
    """The API over ``store``. ``client_clock`` honours a request's ``now``:
    for conformance tests only, never in production (any worker could move
    the clock its leases are judged by). ``max_claim_wait`` caps how long a
    claim may long-poll. ``transport``: announce enqueued and retried jobs on
    it (the caller owns it and closes it). ``services``: run on their timers
    while the app serves (the pruner), stopped at shutdown.
    ``round_connections``: the most database connections the workers' rounds
    use at once (PostgreSQL; SQLite runs them on the loop, one at a time).
    ``throttle``: how failed bearer tokens are held back (``server.throttle``;
    default: its defaults).
    ``worker_policy``: what worker tokens may do with workers (``workers.py``)."""
    if max_body < 1024:
        raise ConfigError(f"max_body must be at least 1024 bytes, got {max_body}")
    if isinstance(round_connections, bool) or not isinstance(round_connections, int) or round_connections < 1:
        raise ConfigError(f"round_connections must be an int >= 1, got {round_connections!r}")
    s = _Server(store, tokens, client_clock, max_body, max_payload_bytes, max_claim_wait, transport,
                throttle=throttle or Throttle(), workers=worker_policy or WorkerPolicy())
    document = build_document(client_clock=client_clock, max_body=max_body, max_wait=max_claim_wait)

    async def openapi(request: Request) -> Response:
        try:
            identify(s.tokens, s.throttle, request)
        except ApiError as exc:
            return _error_response(exc.status, exc.code, exc.message, exc.headers, **exc.extra)
        return JSONResponse(document)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
        return _error_response(exc.status_code, code, str(exc.detail), dict(exc.headers or {}))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        s.wakeups.bind()
        store.round_connections(round_connections)  # (on this loop, which runs the rounds)
        listener: Listener | None = None
        try:
            listener = await run_in_threadpool(store.listen, s.wakeups.notify_threadsafe)
        except Exception as exc:  # polling still works
            log.warning("no push channel from the database (%s); long-polling claims poll", exc)
        duties = Duties(services)
        duties.start()
        try:
            yield
        finally:
            await duties.stop()
            if listener is not None:
                listener.close()

    # A worker's rounds first: the router tries each route's pattern in turn
    # (their paths are their own: no other route could match them first).
    ops = sorted(wire.OPS, key=lambda op: op.name not in ROUND_FIRST)
    routes = [Route(op.path, _endpoint(s, op), methods=[op.method]) for op in ops]
    routes.append(Route("/openapi.json", openapi, methods=["GET"]))
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error}, lifespan=lifespan)
