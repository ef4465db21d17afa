"""Finding and acting on many jobs from the command line (issue 43): ``tether
jobs`` with the filters of ``app.jobs()``, ``tether cancel|retry|delete`` on
ids or on those filters (the count shown, then a confirmation, ``--yes``,
``--dry-run``, a progress bar for large sets), ``tether purge QUEUE`` and
``tether rerun ID``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import click

from .. import search
from ..app import Tether
from ..errors import ConfigError
from ..model import Job, JobState
from ..worker.pruner import parse_age
from .common import PUBLISH_OPTION, BadUsage, CLIState, JobId, make_console, opened

__all__ = ["cancel", "delete", "jobs", "purge", "rerun", "retry"]

#: a set larger than this shows a progress bar
PROGRESS_FROM = 1000


def parse_expression(text: str, option: str) -> dict[str, Any]:
    """``search.parse_expression``, a usage error when malformed."""
    try:
        return search.parse_expression(text, option)
    except ConfigError as exc:
        raise BadUsage(str(exc)) from None


def _when(text: str | None, option: str) -> datetime | None:
    """An ISO 8601 time, or an age (``2h``: two hours ago)."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        try:
            return datetime.now().astimezone() - timedelta(seconds=parse_age(text, option))
        except ConfigError as exc:
            raise BadUsage(f"{option} {text!r}: an ISO 8601 time or an age such as 30m, 12h, 7d ({exc})") from None
    return when if when.tzinfo is not None else when.astimezone()


def filter_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--state", "states", multiple=True, type=click.Choice([str(s) for s in JobState]),
                     help="Only jobs in this state (repeatable: any of them)."),
        click.option("--queue", help="Only this queue."),
        click.option("--task", help="Only this task."),
        click.option("--tag", "tags", multiple=True, help="Only jobs holding this tag (repeatable: all of them)."),
        click.option("--meta", "meta", multiple=True, metavar="KEY=VALUE",
                     help="Only jobs whose meta holds this (repeatable; 42 is a number, a.b=x nests)."),
        click.option("--args", "args", multiple=True, metavar="KEY=VALUE", help="Only jobs whose args hold this."),
        click.option("--since", metavar="TIME|AGE", help="Created at or after: ISO 8601, or an age (2h: 2 hours ago)."),
        click.option("--until", metavar="TIME|AGE", help="Created before: ISO 8601, or an age."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def filters_of(states: tuple[str, ...], queue: str | None, task: str | None, tags: tuple[str, ...],
               meta: tuple[str, ...], args: tuple[str, ...], since: str | None, until: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"state": list(states) or None, "queue": queue, "task": task, "tags": list(tags) or None,
                           "created_after": _when(since, "--since"), "created_before": _when(until, "--until")}
    for name, given in (("meta", meta), ("args", args)):
        try:
            out[name] = search.merge_expressions(given, f"--{name}")
        except ConfigError as exc:
            raise BadUsage(str(exc)) from None
    return {k: v for k, v in out.items() if v is not None}


@click.command()
@filter_options
@click.option("--limit", "-n", type=click.IntRange(1, 1000), default=50, show_default=True, help="Jobs per page.")
@click.option("--after", metavar="CURSOR", help="The page after the one that printed this cursor.")
@click.option("--all", "every_page", is_flag=True, help="Every page, not one (with --json: streamed).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def jobs(state: CLIState, /, limit: int, after: str | None, every_page: bool, as_json: bool, **given: Any) -> None:
    """List jobs, newest first, with filters (combined: all must hold); prints
    the cursor of the next page (--after)."""
    from . import render
    filters = filters_of(**given)
    with opened(state) as app:
        now = app.store.db_now()
        console = make_console()
        shown = 0
        for page_jobs, cursor in _pages(app, filters, limit, after, every_page):
            shown += len(page_jobs)
            if as_json:
                for j in page_jobs:
                    click.echo(json.dumps(json.loads(render.job_json(j)), separators=(",", ":")))
            elif page_jobs:
                console.print(render.jobs_table(page_jobs, now))
            if cursor is not None and not every_page:
                click.echo(f"next page: {_fixed_times(filters)}--after {cursor}", err=as_json)
    if not shown and not as_json:
        console.print("no jobs match" if filters else "no jobs yet")


def _fixed_times(filters: dict[str, Any]) -> str:
    """--since and --until as the times they stood for on this page: an age
    (2h) moves with the clock, and a cursor is refused with other filters."""
    out = ""
    for option, name in (("--since", "created_after"), ("--until", "created_before")):
        if filters.get(name) is not None:
            out += f"{option} {filters[name].isoformat()} "
    return out


def _pages(app: Tether, filters: dict[str, Any], limit: int, after: str | None,
           every: bool) -> Iterator[tuple[list[Job], str | None]]:
    while True:
        page = app.jobs(limit=limit, after=after, **filters)
        yield page.jobs, page.next
        if not every or page.next is None:
            return
        after = page.next


def _act(state: CLIState, what: str, ids: tuple[int, ...], filters: dict[str, Any], yes: bool, dry_run: bool,
         count: Callable[..., int], run: Callable[..., int], one: Callable[[Tether, int], str] | None,
         transport: str | None = None) -> None:
    """A bulk action on ids (one by one, as the single-job commands, or as
    the filter ``ids=`` when ``one`` is None) or on a filter (count, confirm,
    batches)."""
    if ids and filters:
        raise BadUsage(f"{what}: give job ids or filters, not both")
    if ids and one is None:
        filters, ids = {"ids": list(ids)}, ()
    with opened(state, transport=transport) as app:
        if ids and one is not None:
            for job_id in ids:
                click.echo(one(app, job_id))
            return
        if not filters:
            raise BadUsage(f"{what}: give job ids, or filters (--state, --queue, --task, --tag, --meta, --args, "
                           "--since, --until)")
        total = count(app, **filters)
        if dry_run:
            click.echo(f"would {what} {total} job(s)")
            return
        if total == 0:
            click.echo(f"no jobs to {what}")
            return
        if not yes:
            click.confirm(f"{what} {total} job(s)?", abort=True, err=True)
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        with Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=make_console(stderr=True), transient=True, disable=total < PROGRESS_FROM) as bar:
            task = bar.add_task(what, total=total)
            done = run(app, progress=lambda n: bar.advance(task, n), **filters)
    click.echo(f"{what}: {done} job(s)")


def _counter(narrowed: dict[str, Any]) -> Callable[..., int]:
    """How many jobs an action would act on: those matching, in the states it acts on."""
    def count(app: Tether, **filters: Any) -> int:
        if "state" in filters and "state" in narrowed:
            states = set(filters["state"] if isinstance(filters["state"], list) else [filters["state"]])
            kept = [s for s in narrowed["state"] if s in states]
            if not kept:
                return 0
            return app.count_jobs(**{**filters, "state": kept})
        return app.count_jobs(**{**filters, **narrowed})
    return count


def _one_cancel(app: Tether, job_id: int) -> str:
    new_state = app.cancel(job_id)
    if new_state is JobState.RUNNING:
        return (f"job {job_id}: cancel requested; it is running, and its worker will stop it at the next "
                "heartbeat (state: running)")
    return f"job {job_id}: {new_state}"


def _one_retry(app: Tether, job_id: int) -> str:
    app.retry(job_id)
    after = app.get_job(job_id)
    shown = after.state if after is not None else JobState.QUEUED
    extra = f" (attempts {after.attempts_used}/{after.max_attempts})" if after is not None else ""
    return f"job {job_id}: {shown}{extra}"


_BULK: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [click.argument("ids", nargs=-1, type=JobId()), filter_options,
         click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation."),
         click.option("--dry-run", is_flag=True, help="Count the jobs it would act on; change nothing.")]


def bulk_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(_BULK):
        fn = option(fn)
    return fn


@click.command()
@bulk_options
@click.pass_obj
def cancel(state: CLIState, /, ids: tuple[int, ...], yes: bool, dry_run: bool, **given: Any) -> None:
    """Cancel jobs, by id or by filter: queued ones at once, running ones at
    their worker's next heartbeat (finished ones are left)."""
    _act(state, "cancel", ids, filters_of(**given), yes, dry_run, _counter({"state": ["queued", "running"]}),
         Tether.cancel_many, _one_cancel)


@click.command()
@bulk_options
@PUBLISH_OPTION
@click.pass_obj
def retry(state: CLIState, /, ids: tuple[int, ...], yes: bool, dry_run: bool, transport: str | None,
          **given: Any) -> None:
    """Send dead or cancelled jobs back to their queue, by id or by filter
    (with --transport NATS: and publish them there, marked as retries)."""
    _act(state, "retry", ids, filters_of(**given), yes, dry_run, _counter({"state": ["dead", "cancelled"]}),
         Tether.retry_many, _one_retry, transport)


@click.command()
@bulk_options
@click.pass_obj
def delete(state: CLIState, /, ids: tuple[int, ...], yes: bool, dry_run: bool, **given: Any) -> None:
    """Delete finished jobs (and their attempts), by id or by filter; a filter
    that matches queued or running jobs is refused (add --state)."""
    _act(state, "delete", ids, filters_of(**given), yes, dry_run, Tether.count_deletable, Tether.delete_many, None)


@click.command()
@click.argument("queue")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Count the queued jobs; change nothing.")
@click.pass_obj
def purge(state: CLIState, queue: str, yes: bool, dry_run: bool) -> None:
    """Cancel every queued job of QUEUE (running ones go on)."""
    _act(state, "cancel", (), {"queue": queue, "state": "queued"}, yes, dry_run, _counter({}), Tether.cancel_many,
         _one_cancel)


@click.command()
@click.argument("job_id", type=JobId())
@PUBLISH_OPTION
@click.pass_obj
def rerun(state: CLIState, job_id: int, transport: str | None) -> None:
    """Run a finished job again: a new job with its task, args and options."""
    with opened(state, transport=transport) as app:
        new_id = app.rerun(job_id)
    click.echo(new_id)
    click.echo(f"job {new_id}: queued, a rerun of job {job_id}", err=True)
