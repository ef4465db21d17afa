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
from ..model import JobState, Outcome
from ..numbers import BadNumber, parse_int, parse_job_id
from ..search import MAX_IDS, merge_expressions
from ..server.requests import ApiError, client_gone, read_capped
from ..server.throttle import Throttle
from ..store.worker_rows import WORKERS_PAGE
from .chart import chart, timeline
from .security import COOKIE, LOOPBACK_HOSTS, Guard, HostCheck, Session, allowed_names, safe_next

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
JOBS_LIMIT = 100
#: the jobs page's filter fields (the query string's and the bulk form's)
FILTER_FIELDS = ("state", "queue", "task", "tag", "meta")
#: the bulk actions on everything a filter matches, and the states each acts on (delete: the finished ones)
BULK_STATES = {"cancel": ("queued", "running"), "retry": ("dead", "cancelled"), "delete": ("succeeded", "dead",
                                                                                           "cancelled")}
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
            notice=guard.notice(request), rel=fmt_rel, backend=tether.dsn.backend, timeline=timeline, **ctx)
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

    async def jobs(request: Request, session: Session) -> Response:
        q = request.query_params
        wanted = q.get("id", "").strip().lstrip("#")
        if wanted:
            wanted_id = _job_id(wanted)
            if wanted_id is not None and await run_in_threadpool(tether.get_job, wanted_id) is not None:
                return RedirectResponse(f"/jobs/{wanted_id}", 303)
            return RedirectResponse("/jobs?" + noticed(f"no job with id {wanted[:40]}"), 303)
        try:  # keyset pages (issue 43): the filters of app.jobs(), a tag and meta expressions (customer:42)
            shown, filters = _filters(q)
            page, stats = await run_in_threadpool(
                lambda: (tether.jobs(limit=JOBS_LIMIT, after=q.get("after") or None, **filters), store.stats()))
        except ConfigError as exc:
            return render(request, session, "error.html", status=400, message=str(exc))
        queues = sorted({qu for qu, _ in stats.counts})
        older = None if page.next is None else "/jobs?" + urlencode({**shown, "after": page.next})
        newest = ("/jobs?" + urlencode(shown)) if q.get("after") else None
        return render(request, session, "jobs.html", jobs=page.jobs, now=stats.now, states=STATE_ORDER, queues=queues,
                      f_state=shown.get("state", ""), f_queue=shown.get("queue", ""), f_task=shown.get("task", ""),
                      f_tag=shown.get("tag", ""), f_meta=shown.get("meta", ""), shown=shown, older=older,
                      newest=newest)

    def would(act: str, filters: dict[str, Any]) -> int:
        """How many jobs a bulk action would act on (those in the states it acts on)."""
        if act == "delete":
            return tether.count_deletable(**filters)
        kept = [st for st in BULK_STATES[act] if filters.get("state") in (None, st)]
        return tether.count_jobs(**{**filters, "state": kept}) if kept else 0

    async def do_bulk(request: Request, session: Session, form: dict[str, str]) -> Response:
        """A bulk action on everything the filter matches: the count and a
        confirmation step first, then app.cancel_many / retry_many / delete_many."""
        act = form.get("action", "")
        selected = _selected(form)
        try:
            shown, filters = _filters(form)
            if selected:  # rows ticked on the page: those jobs, whatever the filter
                filters = {"ids": selected}
            elif form.get("rows"):
                raise ConfigError("tick the jobs to act on first")
            if act not in BULK_STATES:
                raise ConfigError(f"unknown action {act[:20]!r}")
            if not any(v is not None for v in filters.values()):
                raise ConfigError("filter the jobs first: an action on every job is not offered here")
            if form.get("confirm") != "yes":
                count = await run_in_threadpool(would, act, filters)
                return render(request, session, "bulk.html", act=act, count=count, shown=shown,
                              ids=",".join(map(str, selected)))
            run = {"cancel": tether.cancel_many, "retry": tether.retry_many, "delete": tether.delete_many}[act]
            done = await run_in_threadpool(lambda: run(**filters))
            notice = f"{act}: {done} job(s)"
        except TetherError as exc:
            notice = str(exc)
            shown = {k: form[k] for k in FILTER_FIELDS if form.get(k)}
        return RedirectResponse("/jobs?" + noticed(notice, **shown), 303)

    async def job(request: Request, session: Session) -> Response:
        job_id = _job_id(request.path_params["job_id"])
        if job_id is None:
            return no_job(request, session)
        found, now = await run_in_threadpool(lambda: (tether.get_job(job_id), store.db_now()))
        if found is None:
            return render(request, session, "error.html", status=404, message=f"no job {job_id}")
        # off the event loop: its values are pretty-printed (_pretty), which
        # took seconds for a deep one while every other request waited
        return await render_off(request, session, "job.html", job=found, now=now,
                                can_cancel=found.state in (JobState.WAITING, JobState.QUEUED, JobState.RUNNING),
                                can_retry=found.state in (JobState.DEAD, JobState.CANCELLED))

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
    async def do_cancel(request: Request, session: Session, form: dict[str, str]) -> Response:
        job_id = _job_id(request.path_params["job_id"])
        if job_id is None:
            return no_job(request, session)
        try:
            state = await run_in_threadpool(tether.cancel, job_id)
            notice = (f"job {job_id}: cancel requested; its worker stops it at the next heartbeat"
                      if state is JobState.RUNNING else f"job {job_id}: {state}")
        except TetherError as exc:
            notice = str(exc)
        return RedirectResponse(f"/jobs/{job_id}?" + noticed(notice), 303)

    async def do_retry(request: Request, session: Session, form: dict[str, str]) -> Response:
        job_id = _job_id(request.path_params["job_id"])
        if job_id is None:
            return no_job(request, session)
        try:
            await run_in_threadpool(tether.retry, job_id)
            notice = f"job {job_id}: queued again"
        except TetherError as exc:
            notice = str(exc)
        return RedirectResponse(f"/jobs/{job_id}?" + noticed(notice), 303)

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
        done, problems = 0, []
        for job_id in ids:
            try:
                await run_in_threadpool(tether.retry, job_id)
                done += 1
            except TetherError as exc:
                problems.append(str(exc))
        notice = f"{done} dead job(s) queued again" + (f"; {len(problems)} refused: {problems[0]}" if problems else "")
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

    routes = [
        Route("/", page(overview)),
        Route("/jobs", page(jobs)),
        Route("/jobs/retry-dead", page(action(do_retry_dead)), methods=["POST"]),
        Route("/jobs/bulk", page(action(do_bulk)), methods=["POST"]),
        Route("/jobs/{job_id}", page(job)),
        Route("/jobs/{job_id}/cancel", page(action(do_cancel)), methods=["POST"]),
        Route("/jobs/{job_id}/retry", page(action(do_retry)), methods=["POST"]),
        Route("/queues/{queue}/pause", page(action(do_pause)), methods=["POST"]),
        Route("/queues/{queue}/resume", page(action(do_pause)), methods=["POST"]),
        Route("/queues/{queue}/limits", page(action(do_limits)), methods=["POST"]),
        Route("/workers", page(workers)),
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
    """A urlencoded form (the only kind the dashboard sends); first value wins.
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
    return {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}


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


def _filters(given: Any) -> tuple[dict[str, str], dict[str, Any]]:
    """The jobs page's filter fields as given (the non-empty ones, for links
    and forms) and as app.jobs()' filters; ConfigError for a bad one."""
    shown = {k: str(given.get(k) or "").strip() for k in FILTER_FIELDS}
    shown = {k: v for k, v in shown.items() if v}
    state = shown.get("state")
    if state is not None and state not in {str(s) for s in JobState}:
        raise ConfigError(f"unknown state {state[:20]!r}")
    tag = shown.get("tag")
    return shown, {"state": state, "queue": shown.get("queue"), "task": shown.get("task"),
                   "tags": [tag] if tag else None,
                   "meta": merge_expressions(shown.get("meta", "").split(), "meta")}


def _selected(form: dict[str, str]) -> list[int]:
    """The job ids a bulk form names: its ticked rows (``id-N`` fields) or,
    from the confirmation step, ``ids`` (comma-separated); at most MAX_IDS."""
    texts = [k[3:] for k in form if k.startswith("id-")] + [t for t in form.get("ids", "").split(",") if t.strip()]
    ids = {i for i in (_job_id(t.strip()) for t in texts) if i is not None}
    return sorted(ids)[:MAX_IDS]
