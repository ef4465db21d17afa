"""The jobs page and its bulk actions (issue 43), for ``server.create_app``.

- ``/jobs``: the filter bar (``filters.py``), how many jobs match, and a page
  of them, newest first, with keyset paging: ``before=ID`` starts a page
  below that job id (``app.jobs(after=)`` with the filter's cursor), and
  ``trail`` keeps the ``before`` of the pages already seen (newest first
  ``0``), so that "newer" goes back a page without a backwards query.
- ``POST /jobs/bulk``: cancel, retry or delete the rows ticked on the page,
  or everything the filter matches: a confirmation page that says how many
  jobs the action would change now (it changes nothing).
- ``POST /jobs/bulk/run``: the action itself (``cancel_many``,
  ``retry_many``, ``delete_many`` with the same filter), then back to the
  list with how many it changed.

Both POSTs are behind the dashboard's login and CSRF checks (server.action).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..app import Tether
from ..display import STATE_ORDER
from ..errors import TetherError
from ..numbers import BadNumber, parse_job_id
from ..search import JobFilter
from .filters import FIELDS, FilterBar, parse_filter_bar
from .security import Session

__all__ = ["ACTIONS", "JOBS_LIMIT", "MAX_TRAIL", "BulkAction", "JobsPages"]

#: jobs on a page
JOBS_LIMIT = 100
#: the most pages "newer" walks back through (past that it goes to the newest)
MAX_TRAIL = 50

Render = Callable[..., Response]
Noticed = Callable[..., str]


@dataclass(frozen=True, slots=True)
class BulkAction:
    name: str  # cancel, retry, delete
    method: str  # of Tether
    states: tuple[str, ...]  # the jobs it changes
    done: str  # what happened to them, for the notice
    explain: str


ACTIONS = {
    "cancel": BulkAction("cancel", "cancel_many", ("queued", "running"), "cancelled or asked to stop",
                         "Queued jobs are cancelled at once; running ones get a cancel request, which their "
                         "worker passes to the handler at its next heartbeat. Finished jobs are left as they are."),
    "retry": BulkAction("retry", "retry_many", ("dead", "cancelled"), "queued again",
                        "Dead and cancelled jobs go back to queued, due now, with an attempt left. Other jobs are "
                        "left as they are."),
    "delete": BulkAction("delete", "delete_many", ("succeeded", "dead", "cancelled"), "deleted",
                         "Finished jobs are deleted with their attempts; this cannot be undone. Refused when queued "
                         "or running jobs are among them."),
}


def _ids(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        try:
            job_id = parse_job_id(part.strip())
        except BadNumber:
            continue
        if job_id not in out:
            out.append(job_id)
    return out


def _trail(text: str) -> list[int]:
    """The ``before`` of the pages seen (0: the newest page)."""
    out = []
    for part in text.split(",")[-MAX_TRAIL:]:
        if part == "0":
            out.append(0)
        else:
            try:
                out.append(parse_job_id(part))
            except BadNumber:
                return []
    return out


class JobsPages:
    def __init__(self, tether: Tether, render: Render, noticed: Noticed) -> None:
        self.tether, self.render, self.noticed = tether, render, noticed

    async def jobs(self, request: Request, session: Session) -> Response:
        q = request.query_params
        wanted = q.get("id", "").strip().lstrip("#")
        if wanted:
            try:
                wanted_id: int | None = parse_job_id(wanted)
            except BadNumber:
                wanted_id = None
            if wanted_id is not None and await run_in_threadpool(self.tether.get_job, wanted_id) is not None:
                return RedirectResponse(f"/jobs/{wanted_id}", 303)
            return RedirectResponse("/jobs?" + self.noticed(f"no job with id {wanted[:40]}"), 303)
        bar = parse_filter_bar(q)
        try:
            before = parse_job_id(q["before"]) if q.get("before", "0") != "0" else 0
        except BadNumber:
            before = 0
        trail = _trail(q.get("trail", "")) if before else []
        tether, store = self.tether, self.tether.store

        def read() -> tuple[Any, ...]:
            stats = store.stats()
            if bar.error is not None:
                return [], None, None, stats
            after = JobFilter.of(bar.filters).cursor(before) if before else None
            found = tether.jobs(limit=JOBS_LIMIT, after=after, **bar.filters)
            return found.jobs, found.next, self._count(bar, stats), stats

        found, more, total, stats = await run_in_threadpool(read)
        queues = sorted({qu for qu, _ in stats.counts} | ({bar.fields["queue"]} if bar.fields["queue"] else set()))
        base = bar.query
        older = newer = None
        if more is not None and found:
            older = _link(base, before=found[-1].id, trail=[*trail, before][-MAX_TRAIL:])
        if before:
            newer = _link(base, before=trail[-1], trail=trail[:-1]) if trail else _link(base)
        return self.render(request, session, "jobs.html", status=200 if bar.error is None else 400, jobs=found, now=stats.now, states=STATE_ORDER,
                           queues=queues, bar=bar, total=total, older=older, newer=newer,
                           newest=_link(base) if before else None, limit=JOBS_LIMIT, fields=FIELDS,
                           actions=ACTIONS)

    def _count(self, bar: FilterBar, stats: Any) -> int:
        """How many jobs the filter matches: from the stats the page reads
        anyway when it filters on state and queue only (the unfiltered count
        is a scan of every job), else count_jobs."""
        if set(bar.filters) <= {"state", "queue"}:
            return sum(n for (queue, state), n in stats.counts.items()
                       if bar.filters.get("queue", queue) == queue and bar.filters.get("state", state) == state)
        return self.tether.count_jobs(**bar.filters)

    def _target(self, form: dict[str, str]) -> tuple[BulkAction | None, dict[str, Any], FilterBar, str | None]:
        """The action a bulk form names, its filters, and why it cannot be done (or None)."""
        do, _, scope = form.get("do", "").partition(":")
        action = ACTIONS.get(do)
        bar = parse_filter_bar(form)
        if action is None or scope not in ("selected", "matching"):
            return None, {}, bar, "unknown bulk action: choose cancel, retry or delete"
        if scope == "selected":
            ids = _ids(form.get("ids", ""))
            if not ids:
                return action, {}, bar, "no rows were ticked: tick the jobs to act on, or act on all that match"
            return action, {"ids": ids[:JOBS_LIMIT * 10]}, bar, None
        if bar.error is not None:
            return action, {}, bar, bar.error
        if bar.empty:
            return action, {}, bar, ("the filter is empty, so this would act on every job: choose a state, queue, "
                                     "task, tag or expression first")
        return action, bar.filters, bar, None

    def _affected(self, action: BulkAction, filters: dict[str, Any]) -> int:
        """How many jobs ``action`` would change now (delete: refused, with
        the error, when live jobs are among them)."""
        if action.name == "delete":
            return self.tether.count_deletable(**filters)
        given = filters.get("state")
        states = [s for s in action.states if given is None or s == given]
        return self.tether.count_jobs(**{**filters, "state": states}) if states else 0

    async def bulk_confirm(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        action, filters, bar, problem = self._target(form)
        count = None
        if action is not None and problem is None:
            try:
                count = await run_in_threadpool(self._affected, action, filters)
            except TetherError as exc:
                problem = str(exc)
        return self.render(request, session, "bulk.html", status=200 if problem is None else 400,
                           action=action, scope=form.get("do", "").partition(":")[2], filters=filters, bar=bar,
                           count=count, problem=problem, ids=",".join(str(i) for i in filters.get("ids", ())),
                           back="/jobs" + (f"?{bar.query}" if bar.query else ""), fields=FIELDS)

    async def bulk_run(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        action, filters, bar, problem = self._target(form)
        if action is not None and problem is None:
            try:
                n = await run_in_threadpool(lambda: getattr(self.tether, action.method)(**filters))
                notice = f"{n} job(s) {action.done}"
            except TetherError as exc:
                notice = f"{action.name}: {exc}"
        else:
            notice = problem or "nothing done"
        params = {k: v for k, v in bar.fields.items() if v}
        return RedirectResponse("/jobs?" + self.noticed(notice, **params), 303)


def _link(base: str, *, before: int | None = None, trail: list[int] | None = None) -> str:
    parts = [base] if base else []
    if before:
        parts.append(f"before={before}")
        if trail:
            parts.append("trail=" + ",".join(str(t) for t in trail))
    return "/jobs" + ("?" + "&".join(parts) if parts else "")
