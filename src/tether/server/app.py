"""The HTTP API over a Store: a Starlette app built from ``wire.OPS``, with
the operations by responsibility in ``jobs`` (producers and readers),
``rounds`` (a worker's rounds, long-polling claims) and ``admin`` (upkeep,
workers, schema, queues, schedules); this module is the request handling
they share and the app factory.

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

A delivering ``transport`` (NATS) announces what enqueue and retry committed
(``jobs``); ``services`` run on their timers while the app serves (``admin``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..config import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_SERVER_ROUND_CONNECTIONS
from ..errors import ConfigError, StaleAttempt, TetherError
from ..store import Listener, Store
from ..store.http import wire
from ..transport import Transport
from ..worker.service import PeriodicService
from . import workers
from .admin import CONTROL
from .auth import Caller, TokenTable, identify
from .context import Server
from .duties import Duties
from .flows import FLOWS, Heard, released_listener
from .jobs import JOBS
from .many import MANY
from .openapi import build_document
from .requests import ApiError, Args, arguments, client_gone
from .rounds import LONG_POLLS, ROUND_FIRST, ROUNDS, ROWS, WORKER_REPORTS, long_poll
from .throttle import Throttle
from .workers import WorkerPolicy

__all__ = ["DEFAULT_MAX_BODY", "create_app"]

log = logging.getLogger("tether.server")

DEFAULT_MAX_BODY = 8 * 1024 * 1024

#: every operation but the rounds awaited on the loop (``ROUNDS``, ``LONG_POLLS``): run in a thread
HANDLERS: dict[str, Callable[[Server, Args], Args]] = {**JOBS, **MANY, **WORKER_REPORTS, **CONTROL, **FLOWS}
assert len(HANDLERS) == len(JOBS) + len(MANY) + len(WORKER_REPORTS) + len(CONTROL) + len(FLOWS), \
    "an operation in two modules"

#: operations after which queued jobs may be due: wake long-polling claims
WAKES = frozenset({"enqueue", "enqueue_workflow", "enqueue_batch", "retry", "fail", "release", "reap",
                   "expire_leases", "fire_schedules", "set_paused", "set_limits", "set_key_limits"})

#: operations that bind their worker to the token (checked after they ran)
BINDS = frozenset({"register_worker"})


# -- request handling -------------------------------------------------------------------------
def _authorize(s: Server, request: Request, op: wire.Op) -> Caller:
    caller = identify(s.tokens, s.throttle, request)
    if not s.tokens.allows(caller.scopes, op.scopes):
        needed = [*op.scopes, *(() if "admin" in op.scopes else ("admin",))]  # admin grants everything
        raise ApiError(403, "forbidden", f"{op.name} needs a token with scope {' or '.join(needed)}; "
                                         f"this token has {', '.join(sorted(caller.scopes))}")
    return caller


async def _authorize_workers(s: Server, op: wire.Op, caller: Caller, args: Args) -> None:
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


def _endpoint(s: Server, op: wire.Op) -> Callable[[Request], Any]:
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
            with Heard(op.name) as heard:  # what its endings finished: its answer says (wire_flows)
                if first is not None:
                    result: Args = await long_poll(s, request, args, first)
                elif round_ is not None:
                    result = await round_(s, args)
                else:
                    assert handler is not None
                    result = await run_in_threadpool(handler, s, args)
            result = heard.said(result)
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
    s = Server(store, tokens, client_clock, max_body, max_payload_bytes, max_claim_wait, transport,
                throttle=throttle or Throttle(), workers=worker_policy or WorkerPolicy())
    store.add_flow_listener(released_listener(s))
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
