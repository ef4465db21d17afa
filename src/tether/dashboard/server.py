"""The dashboard: a Starlette app over a tether database (either backend).

Server-rendered HTML (Jinja2, autoescaped: job args and error text are user
data), one small script for live refresh, no build step. Every page and
``/metrics`` need authentication (see ``security``) unless built with
``token=None``; every change is a CSRF-checked POST.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlencode
from zoneinfo import ZoneInfo

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from ..app import Tether
from ..config import parse_rate
from ..display import (
    STATE_ORDER,
    fmt_age,
    fmt_clock,
    fmt_concurrency,
    fmt_limits,
    fmt_rate,
    fmt_rel,
    fmt_seconds,
    fmt_time,
)
from ..errors import ConfigError, TetherError
from ..model import FINISHED_STATES, JobState, Outcome
from ..numbers import BadNumber, parse_int, parse_job_id
from ..server.requests import ApiError, client_gone, read_capped
from ..server.throttle import Throttle
from ..store.worker_rows import WORKERS_PAGE
from .chart import chart
from .flows_pages import FlowsPages
from .jobs_pages import JOBS_LIMIT, JobsPages
from .security import COOKIE, LOOPBACK_HOSTS, Guard, HostCheck, Session, allowed_names, safe_next
from .timeline import timeline

__all__ = ["MAX_FORM_BYTES", "create_app"]

log = logging.getLogger("tether.dashboard")

Handler = Callable[[Request, Session], Awaitable[Response]]

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
STATIC = {"dashboard.css": "text/css; charset=utf-8", "dashboard.js": "text/javascript; charset=utf-8"}
#: the largest form body read (the dashboard's forms are a few hundred bytes); larger ones get 413
MAX_FORM_BYTES = 64 * 1024
#: the most characters of one value (args, result, meta) a job's page shows
PRETTY_CHARS = 20_000
#: the furthest a workers page may start
MAX_OFFSET = 10**9
#: the overview's throughput chart: the last hour, a bar a minute
CHART_BUCKETS, CHART_SECONDS = 60, 60


def create_app(tether: Tether, *, token: str | None, metrics: Any = None, secret: bytes | None = None,
               silent_after: float | None = None, allowed_hosts: Iterable[str] = LOOPBACK_HOSTS,
               throttle: Throttle | None = None) -> Starlette:
    """The dashboard for ``tether``'s database. ``token=None`` serves without
    authentication; ``metrics`` (a ``tether.metrics.Metrics``) is served at
    ``/metrics``. A worker silent for ``silent_after`` seconds (default: the
    app's lease TTL) is shown as probably gone. Requests whose ``Host`` is not
    in ``allowed_hosts`` (host names, no port; ``*.example.com`` for its
    subdomains, ``*`` for any) get a 400: that stops DNS rebinding. Failed
    logins (and /metrics bearer tokens) are held back per address and
    globally by ``throttle`` (default: ``server.throttle``'s defaults)."""
    guard = Guard(token=token, secret=secret, throttle=throttle)
    hosts = allowed_names(allowed_hosts)
    env = Environment(loader=PackageLoader("tether.dashboard", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters.update(time=fmt_time, age=fmt_age, clock=fmt_clock, pretty=_pretty, concurrency=fmt_concurrency,
                       rate=fmt_rate, seconds=fmt_seconds)
    silent = silent_after if silent_after is not None else tether.timers.lease_ttl
    store = tether.store

    def noticed(notice: str, **params: str) -> str:
        """A redirect's query string carrying ``notice``, signed (Guard.notice)."""
        return urlencode({**params, "notice": notice, "ns": guard.notice_signature(notice)})

    def render(request: Request, session: Session, name: str, status: int = 200, **ctx: Any) -> Response:
        html = env.get_template(name).render(
            request=request, csrf=guard.csrf_token(session), auth=guard.auth_required, in_=session.authenticated,
            notice=guard.notice(request), rel=fmt_rel, backend=tether.dsn.backend, **ctx)
        return _finish(HTMLResponse(html, status_code=status), guard, session)

    async def render_off(request: Request, session: Session, name: str, status: int = 200, **ctx: Any) -> Response:
        """``render`` on a worker thread, for pages whose values may be large."""
        return await run_in_threadpool(lambda: render(request, session, name, status, **ctx))

    def page(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            session = guard.session(request)
            if not session.authenticated:
                if request.method != "GET":
                    return _finish(PlainTextResponse("not logged in\n", status_code=401), guard, None)
                return _finish(RedirectResponse("/login?" + urlencode({"next": _path(request)}), 303), guard, None)
            return await handler(request, session)

        return endpoint

    def action(handler: Callable[[Request, Session, dict[str, str]], Awaitable[Response]]) -> Handler:
        async def checked(request: Request, session: Session) -> Response:
            form = await _form(request)
            if isinstance(form, Response):
                return form
            problem = guard.csrf_problem(request, session, form.get("csrf"))
            if problem is not None:
                return _finish(PlainTextResponse(f"refused: {problem}\n", status_code=403), guard, session)
            return await handler(request, session, form)

        return checked

    def no_job(request: Request, session: Session) -> Response:
        """A job path whose id is not a job id (not ASCII digits, or past 64 bits): no such job."""
        return render(request, session, "error.html", status=404,
                      message=f"no job {request.path_params['job_id'][:40]!r}: a job id is a whole number")

    # -- pages ---------------------------------------------------------------------------
    async def overview(request: Request, session: Session) -> Response:
        stats, recoveries, throughput, paused, limits = await run_in_threadpool(lambda: (
            store.stats(), store.recent_attempts([Outcome.LEASE_EXPIRED], limit=5),
            store.throughput(buckets=CHART_BUCKETS, bucket_seconds=CHART_SECONDS), store.paused_queues(),
            store.queue_limits()))
        queues = sorted({q for q, _ in stats.counts} | set(paused) | {lim.queue for lim in limits})
        totals = {s: sum(n for (_, st), n in stats.counts.items() if st == s) for s in STATE_ORDER}
        return render(request, session, "overview.html", stats=stats, queues=queues, states=STATE_ORDER,
                      totals=totals, recoveries=recoveries, now=stats.now, chart=chart(throughput),
                      paused=set(paused), limits={lim.queue: lim for lim in limits})

    async def job(request: Request, session: Session) -> Response:
        job_id = _job_id(request.path_params["job_id"])
        if job_id is None:
            return no_job(request, session)
        found, now = await run_in_threadpool(lambda: (tether.get_job(job_id), store.db_now()))
        if found is None:
            return render(request, session, "error.html", status=404, message=f"no job {job_id}")
        run, batch = await run_in_threadpool(flows.flow_of, job_id)
        # off the event loop: its values are pretty-printed (_pretty), which
        # took seconds for a deep one while every other request waited
        return await render_off(request, session, "job.html", job=found, now=now,
                                can_cancel=found.state in (JobState.WAITING, JobState.QUEUED, JobState.RUNNING),
                                can_retry=found.state in (JobState.DEAD, JobState.CANCELLED),
                                can_rerun=found.state in FINISHED_STATES, timeline=timeline(found.attempts, now), run=run, batch=batch)

    async def workers(request: Request, session: Session) -> Response:
        try:  # a page of them (issue 41: 10,000 rows froze this page)
            offset = parse_int(request.query_params.get("offset", "0"), "offset", hi=MAX_OFFSET)
        except BadNumber as exc:
            return render(request, session, "error.html", status=400, message=str(exc))
        found, stats = await run_in_threadpool(lambda: (
            store.workers_page(limit=WORKERS_PAGE + 1, offset=offset), store.stats()))
        total = len(stats.workers) if stats.workers_total is None else stats.workers_total
        return await render_off(request, session, "workers.html", workers=found[:WORKERS_PAGE], now=stats.now,
                                silent=silent, offset=offset, page=WORKERS_PAGE, more=len(found) > WORKERS_PAGE,
                                total=total)

    async def recoveries(request: Request, session: Session) -> Response:
        found, now = await run_in_threadpool(
            lambda: (store.recent_attempts([Outcome.LEASE_EXPIRED], limit=100), store.db_now()))
        return render(request, session, "recoveries.html", recoveries=found, now=now)

    async def schedules(request: Request, session: Session) -> Response:
        found, now = await run_in_threadpool(lambda: (tether.schedules(), store.db_now()))
        return render(request, session, "schedules.html", schedules=found, now=now, zoned=_zoned)

    # -- actions -----------------------------------------------------------------------------
    def on_job(act: Callable[[int], tuple[int, str]]) -> Callable[[Request, Session, dict[str, str]],
                                                                  Awaitable[Response]]:
        """An action on the job of the path: ``act(job_id)`` gives the job to
        show next and the notice; a refusal (TetherError) is the notice."""
        async def handler(request: Request, session: Session, form: dict[str, str]) -> Response:
            job_id = _job_id(request.path_params["job_id"])
            if job_id is None:
                return no_job(request, session)
            try:
                shown, notice = await run_in_threadpool(act, job_id)
            except TetherError as exc:
                shown, notice = job_id, str(exc)
            return RedirectResponse(f"/jobs/{shown}?" + noticed(notice), 303)

        return handler

    def cancel_one(job_id: int) -> tuple[int, str]:
        state = tether.cancel(job_id)
        return job_id, (f"job {job_id}: cancel requested; its worker stops it at the next heartbeat"
                        if state is JobState.RUNNING else f"job {job_id}: {state}")

    def retry_one(job_id: int) -> tuple[int, str]:
        tether.retry(job_id)
        return job_id, f"job {job_id}: queued again"

    def rerun_one(job_id: int) -> tuple[int, str]:
        new_id = tether.rerun(job_id)
        return new_id, f"job {new_id}: a rerun of job {job_id}"

    async def do_pause(request: Request, session: Session, form: dict[str, str]) -> Response:
        """Pause (or, with ``resume`` in the path, resume) a queue: app.pause / app.resume."""
        queue, resume = request.path_params["queue"], request.url.path.endswith("/resume")
        try:
            await run_in_threadpool(tether.resume if resume else tether.pause, queue)
            notice = f"queue {queue}: {'resumed' if resume else 'paused; running jobs finish'}"
        except TetherError as exc:
            notice = str(exc)
        return RedirectResponse("/?" + noticed(notice), 303)

    async def do_limits(request: Request, session: Session, form: dict[str, str]) -> Response:
        """Set a queue's limits whole (a field left empty lifts that one): app.configure_queue."""
        queue = request.path_params["queue"]
        try:
            concurrency, rate = _concurrency(form.get("concurrency", "")), form.get("rate", "").strip()
            stored = await run_in_threadpool(lambda: tether.configure_queue(
                queue, concurrency=concurrency, rate=parse_rate(rate, "the rate") if rate else None))
            lifted = stored.concurrency is None and stored.rate_limit is None
            shown = "limits lifted (no concurrency or rate limit)" if lifted else fmt_limits(stored)
            notice = f"queue {queue}: {shown}"
        except TetherError as exc:
            notice = str(exc)
        return RedirectResponse("/?" + noticed(notice), 303)

    async def do_schedule(request: Request, session: Session, form: dict[str, str]) -> Response:
        """Pause, resume or trigger the schedule named in the form (a name may hold any
        printable text, so it is not in the path): app.pause_schedule and its siblings."""
        name, act = form.get("name", ""), request.url.path.rsplit("/", 1)[-1]
        try:
            if act == "trigger":
                job_id = await run_in_threadpool(tether.trigger_schedule, name)
                notice = f"schedule {name}: triggered job {job_id}"
            else:
                await run_in_threadpool(tether.pause_schedule if act == "pause" else tether.resume_schedule, name)
                notice = f"schedule {name}: {'paused' if act == 'pause' else 'resumed at its next tick'}"
        except TetherError as exc:
            notice = str(exc)
        return RedirectResponse("/schedules?" + noticed(notice), 303)

    async def do_retry_dead(request: Request, session: Session, form: dict[str, str]) -> Response:
        ids = [i for i in (_job_id(text.strip()) for text in form.get("ids", "").split(",")) if i is not None]
        # one set-based retry_many, not a round trip per job
        ids = list(dict.fromkeys(ids))[:JOBS_LIMIT * 10]
        try:
            done = await run_in_threadpool(lambda: tether.retry_many(ids=ids, state="dead")) if ids else 0
            left = len(ids) - done
            notice = f"{done} dead job(s) queued again" + (
                f"; {left} left as they are (not dead, or an active job holds their dedup key)" if left else "")
        except TetherError as exc:
            notice = str(exc)
        return RedirectResponse("/jobs?" + noticed(notice, state="dead"), 303)

    # -- login, metrics, static ----------------------------------------------------------------
    async def login(request: Request) -> Response:
        session = guard.session(request)
        target = safe_next(request.query_params.get("next"))
        if session.authenticated:
            return RedirectResponse(target, 303)
        if request.method == "GET":
            return render(request, session, "login.html", next=target, failed=False)
        form = await _form(request)
        if isinstance(form, Response):
            return form
        problem = guard.csrf_problem(request, session, form.get("csrf"))
        if problem is not None:
            return _finish(PlainTextResponse(f"refused: {problem}\n", status_code=403), guard, session)
        wait = guard.retry_after(request)
        if wait is not None:  # the token is not looked at
            response = render(request, session, "login.html", status=429, next=safe_next(form.get("next")),
                              failed=True, wait=wait)
            response.headers["Retry-After"] = str(wait)
            return response
        new = guard.login(form.get("token", ""), request)
        if new is None:
            return render(request, session, "login.html", status=401, next=safe_next(form.get("next")), failed=True)
        return _finish(RedirectResponse(safe_next(form.get("next")), 303), guard, new)

    async def logout(request: Request, session: Session, form: dict[str, str]) -> Response:
        guard.revoke(session)
        response = RedirectResponse("/login", 303)
        response.delete_cookie(COOKIE, path="/")
        return response

    async def metrics_endpoint(request: Request) -> Response:
        if not guard.session(request).authenticated and (wait := guard.retry_after(request)) is not None:
            return PlainTextResponse(f"too many failed tokens from your address: try again in {wait}s\n", 429,
                                     headers={"Retry-After": str(wait)})
        if not (guard.session(request).authenticated or guard.bearer_ok(request)):
            return PlainTextResponse("unauthorized: log in or send Authorization: Bearer <token>\n", 401,
                                     headers={"WWW-Authenticate": 'Bearer realm="tether"'})
        if metrics is None:
            return PlainTextResponse("metrics are off (install tether[metrics])\n", 404)
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        body = await run_in_threadpool(generate_latest, metrics.registry)
        return Response(body, headers={"Content-Type": CONTENT_TYPE_LATEST, "Cache-Control": "no-store"})

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return PlainTextResponse("not found\n", 404)
        body = resources.files("tether.dashboard").joinpath("static", name).read_bytes()
        return Response(body, headers={"Content-Type": STATIC[name], "X-Content-Type-Options": "nosniff"})

    listing, flows = JobsPages(tether, render, noticed), FlowsPages(tether, render)
    routes = [
        Route("/", page(overview)),
        Route("/jobs", page(listing.jobs)),
        Route("/jobs/retry-dead", page(action(do_retry_dead)), methods=["POST"]),
        Route("/jobs/bulk", page(action(listing.bulk_confirm)), methods=["POST"]),
        Route("/jobs/bulk/run", page(action(listing.bulk_run)), methods=["POST"]),
        Route("/jobs/{job_id}", page(job)),
        Route("/jobs/{job_id}/cancel", page(action(on_job(cancel_one))), methods=["POST"]),
        Route("/jobs/{job_id}/retry", page(action(on_job(retry_one))), methods=["POST"]),
        Route("/jobs/{job_id}/rerun", page(action(on_job(rerun_one))), methods=["POST"]),
        Route("/queues/{queue}/pause", page(action(do_pause)), methods=["POST"]),
        Route("/queues/{queue}/resume", page(action(do_pause)), methods=["POST"]),
        Route("/queues/{queue}/limits", page(action(do_limits)), methods=["POST"]),
        Route("/workers", page(workers)),
        Route("/workflows/{flow_id}", page(flows.workflow)),
        Route("/batches/{flow_id}", page(flows.batch)),
        Route("/recoveries", page(recoveries)),
        Route("/schedules", page(schedules)),
        *(Route(f"/schedules/{act}", page(action(do_schedule)), methods=["POST"])
          for act in ("pause", "resume", "trigger")),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", page(action(logout)), methods=["POST"]),
        Route("/metrics", metrics_endpoint),
        Route("/static/{name}", static),
    ]
    return Starlette(routes=routes, middleware=[Middleware(HostCheck, allowed=hosts)])


def _finish(response: Response, guard: Guard, session: Session | None) -> Response:
    response.headers.update(SECURITY_HEADERS)
    if session is not None and session.fresh:
        response.set_cookie(COOKIE, guard.cookie_value(session), httponly=True, samesite="strict", path="/")
    return response


async def _form(request: Request) -> dict[str, str] | Response:
    """A urlencoded form (the only kind the dashboard sends).
    Read capped while it streams (the API server's reader): a body over
    MAX_FORM_BYTES gets its 413 (the response returned) before the rest arrives."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return {}
    try:
        body = (await read_capped(request, MAX_FORM_BYTES)).decode("utf-8", "replace")
    except ApiError as exc:
        return PlainTextResponse(f"refused: {exc.message}\n", status_code=exc.status,
                                 headers={**SECURITY_HEADERS, "Connection": "close"})
    except ClientDisconnect:
        client_gone(log, request, f"{request.method} {request.url.path}")
        return Response(status_code=400)
    # the first value of a field wins; ticked rows (``ids``, one field each) are joined with commas
    return {k: ",".join(v) if k == "ids" else v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}


def _job_id(text: str) -> int | None:
    """A job id from a path, a query or a form; None when it is not one."""
    try:
        return parse_job_id(text)
    except BadNumber:
        return None


def _concurrency(text: str) -> int | None:
    """The limits form's concurrency field: empty lifts the limit."""
    text = text.strip()
    if not text:
        return None
    try:
        return parse_int(text, "concurrency", lo=1, hi=10**12 - 1)
    except BadNumber as exc:
        raise ConfigError(f"{exc} (or leave it empty: no limit)") from None


def _path(request: Request) -> str:
    return request.url.path + (f"?{request.url.query}" if request.url.query else "")


def _pretty(value: Any) -> str:
    """``value`` as indented JSON, cut after ``PRETTY_CHARS`` characters: the
    encoder is a generator, so a value that would print as hundreds of
    megabytes (deep nesting multiplies the indentation) costs no more than
    the cut (a deeper one than Python's stack allows is cut where it fails)."""
    encoder = json.JSONEncoder(indent=2, ensure_ascii=False, sort_keys=True, default=str)
    out: list[str] = []
    size = 0
    try:
        for chunk in encoder.iterencode(value):
            out.append(chunk)
            size += len(chunk)
            if size > PRETTY_CHARS:
                break
    except (RecursionError, ValueError):
        return "".join(out)[:PRETTY_CHARS] + "\n... (too deeply nested to show in full)"
    text = "".join(out)
    if size > PRETTY_CHARS:
        return text[:PRETTY_CHARS] + f"\n... (cut at {PRETTY_CHARS} characters)"
    return text


def _zoned(dt: datetime, zone: str) -> str:
    """A tick as its schedule's cron reads it: in the schedule's own zone."""
    try:
        return dt.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M:%S %Z")
    except (KeyError, ValueError, OSError):
        return fmt_time(dt)
