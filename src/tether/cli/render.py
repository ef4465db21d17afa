"""Rich renderings of jobs, attempts and queue status, plus JSON for ``--json``.

Times are shown in local time; ages and durations are measured against the
database clock (``now`` comes from ``store.db_now()`` or ``Stats.now``).
Job data (task names, args, errors, progress, worker ids...) is user data: it
goes in as ``Text`` (never read as rich markup) with its control characters
made visible (``display.visible``), and ``--json`` escapes them too.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..display import STATE_ORDER, fmt_age, fmt_concurrency, fmt_rate, fmt_rel, fmt_time, json_visible, visible
from ..model import LIVE_WITHIN, Attempt, Job, JobState, Outcome, QueueLimits, ScheduleInfo, Stats, WorkerInfo

__all__ = [
    "STATE_ORDER",
    "attempts_table",
    "data",
    "fmt_age",
    "fmt_time",
    "job_details",
    "job_json",
    "jobs_table",
    "limits_line",
    "outcome_text",
    "progress_text",
    "queues_table",
    "schedules_json",
    "schedules_table",
    "state_text",
    "unknown_tasks_table",
    "workers_table",
]

#: how a terminal shows each state and outcome (their facts: model.STATE_FACTS, OUTCOME_FACTS)
STATE_STYLE = {s: s.style for s in JobState}
OUTCOME_STYLE = {o: o.style for o in Outcome}
#: a worker not seen for longer than the default lease TTL is probably gone
SILENT_AFTER = 30.0


# -- small pieces ---------------------------------------------------------------------
def data(value: object, style: str = "", *, lines: bool = False) -> Text:
    """Job data as a cell: never read as markup, its control characters shown
    as escapes (``lines``: newlines and tabs kept)."""
    return Text(visible(value, lines=lines), style=style)


def state_text(state: JobState) -> Text:
    return Text(str(state), style=STATE_STYLE.get(state, ""))


def outcome_text(outcome: Outcome | None) -> Text:
    if outcome is None:
        return Text("running", style="yellow")
    return Text(str(outcome), style=outcome.style)


def progress_text(fraction: float | None, message: str | None, width: int = 20) -> Text:
    if fraction is None and not message:
        return Text("-")
    out = Text()
    if fraction is not None:
        filled = round(fraction * width)
        out.append("█" * filled, style="green")
        out.append("░" * (width - filled), style="dim")
        out.append(f" {fraction:4.0%}")
    if message:
        out.append(f"  {visible(message)}")
    return out


def _short(text: str | None, limit: int) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _attempts(job: Job) -> str:
    used = f"{job.attempts_used}/{job.max_attempts}"
    return used + (f" (+{job.released} released)" if job.released else "")


# -- jobs -------------------------------------------------------------------------------
def jobs_table(jobs: Sequence[Job], now: datetime) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("id", justify="right", style="bold")
    table.add_column("task")
    table.add_column("queue")
    table.add_column("state")
    table.add_column("attempts", justify="right")
    table.add_column("run at")
    table.add_column("last error", overflow="ellipsis", no_wrap=True, max_width=60)
    for job in jobs:
        run_at = fmt_time(job.run_at)
        if job.state is JobState.QUEUED and job.run_at > now:
            run_at += f" ({fmt_rel(job.run_at, now)})"
        table.add_row(str(job.id), data(job.task), data(job.queue), state_text(job.state), _attempts(job), run_at,
                      data(_short(job.last_error, 60), "red"))
    return table


def attempts_table(attempts: Sequence[Attempt], now: datetime) -> Table:
    table = Table(title="attempts", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("#", justify="right")
    table.add_column("worker")
    table.add_column("claimed at")
    table.add_column("finished at")
    table.add_column("took", justify="right")
    table.add_column("outcome")
    table.add_column("error", overflow="fold")
    for a in attempts:
        end = a.finished_at or now
        took = fmt_age((end - a.claimed_at).total_seconds())
        table.add_row(str(a.attempt), data(a.worker), fmt_time(a.claimed_at), fmt_time(a.finished_at),
                      took if a.finished_at else f"{took}…", outcome_text(a.outcome),
                      data(a.error or "", "red", lines=True))
    return table


def job_details(job: Job, now: datetime, *, tracebacks: bool = False) -> RenderableType:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("job", Text(str(job.id), style="bold"))
    grid.add_row("task", data(job.task))
    grid.add_row("queue", data(f"{job.queue} (priority {job.priority})"))
    grid.add_row("state", state_text(job.state) + Text("  cancel requested" if job.cancel_requested else ""))
    grid.add_row("attempts", _attempts(job) + (f"; attempt token {job.attempt}" if job.attempt else ""))
    grid.add_row("args", data(json.dumps(job.args, ensure_ascii=False)))
    grid.add_row("created", fmt_time(job.created_at))
    grid.add_row("run at", f"{fmt_time(job.run_at)} ({fmt_rel(job.run_at, now)})")
    if job.state is JobState.RUNNING:
        grid.add_row("worker", data(job.locked_by or "-"))
        grid.add_row("lease until", f"{fmt_time(job.lease_until)} ({fmt_rel(job.lease_until, now)})")
    if job.progress is not None or job.progress_message:
        grid.add_row("progress", progress_text(job.progress, job.progress_message))
    if job.finished_at is not None:
        grid.add_row("finished", fmt_time(job.finished_at))
    if job.result is not None:
        grid.add_row("result", data(json.dumps(job.result, ensure_ascii=False)))
    if job.last_error:
        grid.add_row("last error", data(job.last_error, "red", lines=True))
    if job.dedup_key:
        window = f" (taken for {fmt_age(job.dedup_for)} after the job ends)" if job.dedup_for else ""
        grid.add_row("dedup key", data(job.dedup_key + window))
    if job.expires_at is not None:
        grid.add_row("expires", f"{fmt_time(job.expires_at)} ({fmt_rel(job.expires_at, now)}): not started by "
                                "then, it never starts")
    if job.schedule is not None:
        grid.add_row("schedule", data(f"{job.schedule}, tick {fmt_time(job.scheduled_for)}"))
    if job.lease_ttl is not None or job.timeout is not None:
        grid.add_row("limits", f"lease_ttl={job.lease_ttl or 'worker default'} timeout={job.timeout or 'none'}")
    parts: list[RenderableType] = [grid, Text()]
    if job.attempts:
        if job.older_attempts:
            parts.append(Text(f"{job.older_attempts} older attempt(s) not shown: the newest {len(job.attempts)} are",
                              style="dim"))
        parts.append(attempts_table(job.attempts, now))
    else:
        parts.append(Text("no attempts yet", style="dim"))
    if tracebacks:
        for a in job.attempts:
            if a.traceback:
                parts += [Text(f"traceback of attempt {a.attempt}:", style="bold"),
                          data(a.traceback.rstrip(), lines=True)]
    return Group(*parts)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(f"cannot encode {type(value).__name__}")


def job_json(job: Job) -> str:
    fields = dataclasses.asdict(job)
    fields["attempts_used"] = job.attempts_used
    return json_visible(json.dumps(fields, default=_plain, ensure_ascii=False, indent=2))


# -- status -----------------------------------------------------------------------------
def limits_line(limits: QueueLimits) -> Text:
    """``limits: emails concurrency 3/5 running, rate 37/100 per 60s``; a limit
    reached now in yellow (its queue's claims wait for room)."""
    line = Text.assemble(("limits:", "bold cyan"), " ", (visible(limits.queue), "bold"), " ")
    full = [limits.concurrency is not None and limits.running >= limits.concurrency,
            limits.rate_limit is not None and limits.started >= limits.rate_limit]
    parts = [(text, "yellow" if at_limit else "") for text, at_limit in
             zip((fmt_concurrency(limits), fmt_rate(limits)), full, strict=True) if text]
    for i, part in enumerate(parts):
        line.append(", " if i else "")
        line.append(*part)
    return line


def queues_table(stats: Stats) -> Table:
    table = Table(title="jobs by queue and state", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("queue", style="bold")
    for state in STATE_ORDER:
        table.add_column(str(state), justify="right", header_style=STATE_STYLE[state])
    table.add_column("total", justify="right")
    table.add_column("oldest due queued", justify="right")
    queues = sorted({q for q, _ in stats.counts} | set(stats.oldest_queued))
    totals = dict.fromkeys(STATE_ORDER, 0)
    for q in queues:
        row = [stats.counts.get((q, str(s)), 0) for s in STATE_ORDER]
        for s, n in zip(STATE_ORDER, row, strict=True):
            totals[s] += n
        oldest = stats.oldest_queued.get(q)
        age = fmt_age((stats.now - oldest).total_seconds()) if oldest is not None else "-"
        table.add_row(data(q), *[str(n) if n else Text("0", style="dim") for n in row], str(sum(row)), age)
    if len(queues) > 1:
        table.add_section()
        table.add_row("all", *[str(totals[s]) for s in STATE_ORDER], str(sum(totals.values())), "")
    return table


def unknown_tasks_table(stats: Stats) -> Table:
    """Due jobs that no live worker knows the task of: they wait (their budget
    untouched) until a worker with that task runs on their queue."""
    table = Table(title="tasks no live worker knows", title_justify="left", title_style="bold yellow",
                  box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("queue", style="bold")
    table.add_column("task", style="yellow")
    table.add_column("jobs", justify="right")
    table.add_column("oldest due", justify="right")
    for u in stats.unknown:
        oldest = fmt_age((stats.now - u.oldest).total_seconds())
        table.add_row(data(u.queue), data(u.task), str(u.jobs), f"{oldest} ago")
    return table


def unknown_tasks_hint(stats: Stats) -> str:
    """What to do about the unknown tasks' jobs: a queue no live worker serves
    is named first (the usual cause when the app does register the task: a
    job sent to a queue left out of every worker's -q)."""
    now = stats.now.timestamp()
    live = [w for w in stats.workers if w.stopped_at is None and now - w.last_seen.timestamp() <= LIVE_WITHIN]
    unserved = sorted({u.queue for u in stats.unknown} - {q for w in live for q in w.queues})
    first = (f"no live worker serves queue(s) {', '.join(unserved)}: add them to a worker's -q (queues=), or "
             if unserved else "")
    return (f"[dim]{escape(first)}start workers whose app registers these tasks on these queues (a typo never "
            "will: such jobs end dead after the workers' unknown_task_grace, an hour by default)[/dim]")


def workers_table(workers: Sequence[WorkerInfo], now: datetime) -> Table:
    table = Table(title="workers", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("id", style="bold")
    table.add_column("host")
    table.add_column("pid", justify="right")
    table.add_column("last seen", justify="right")
    table.add_column("up", justify="right")
    table.add_column("queues")
    table.add_column("concurrency", justify="right")
    table.add_column("tasks", justify="right")
    for w in workers:
        seen = (now - w.last_seen).total_seconds()
        seen_text = Text(f"{fmt_age(seen)} ago", style="yellow" if seen > SILENT_AFTER else "")
        if seen > SILENT_AFTER:
            seen_text.append(" (silent)")
        table.add_row(data(w.id), data(w.host), str(w.pid), seen_text, fmt_age((now - w.started_at).total_seconds()),
                      data(",".join(w.queues)), str(w.concurrency), "any" if w.tasks is None else str(len(w.tasks)))
    return table


# -- schedules --------------------------------------------------------------------------
def _in_zone(dt: datetime | None, zone: str, now: datetime) -> str:
    """A tick in its schedule's time zone (as the cron reads it) and relative to now."""
    if dt is None:
        return "-"
    try:
        local = dt.astimezone(ZoneInfo(zone))
    except (KeyError, ValueError, OSError):
        local = dt
    return f"{local.strftime('%Y-%m-%d %H:%M:%S %Z')} ({fmt_rel(dt, now)})"


def schedules_table(schedules: Sequence[ScheduleInfo], now: datetime) -> Table:
    table = Table(title="schedules", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("name", style="bold")
    table.add_column("cron")
    table.add_column("timezone")
    table.add_column("queue")
    table.add_column("next tick")
    table.add_column("last fired")
    table.add_column("job", justify="right")
    table.add_column("skipped", justify="right")
    table.add_column("catch-up / overlap")
    for s in schedules:
        name = data(s.name)
        if s.orphaned:
            name.append(" (orphaned)", style="yellow")
        if s.paused:
            name.append(" (paused)", style="yellow")
        if s.dynamic:
            name.append(" (run-time", style="dim")
            if s.task != s.name:
                name.append(", task ", style="dim")
                name.append_text(data(s.task))
            name.append(")", style="dim")
        table.add_row(
            name, data(s.cron), data(s.timezone), data(s.queue),
            Text("not fired: orphaned", style="dim") if s.orphaned else
            Text("not fired: paused", style="dim") if s.paused else _in_zone(s.next_tick, s.timezone, now),
            _in_zone(s.last_fired, s.timezone, now), "-" if s.last_job_id is None else str(s.last_job_id),
            str(s.skipped) if s.skipped else Text("0", style="dim"),
            f"{s.catch_up} / {'yes' if s.overlap else 'no'}",
        )
    return table


def schedules_json(schedules: Sequence[ScheduleInfo]) -> str:
    return json.dumps([dataclasses.asdict(s) for s in schedules], indent=2, default=_plain)  # ASCII: all escaped
