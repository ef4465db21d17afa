"""Job control from the command line (issue 20): ``tether prune``, ``tether pause``,
``tether resume`` and ``tether limit``; per-key limits (issue 44): ``tether
key-limit`` and ``tether limits``."""

from __future__ import annotations

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..app import Tether
from ..config import parse_rate
from ..display import fmt_key_limits, fmt_limits, visible
from ..errors import ConfigError
from ..model import FINISHED_STATES, TERMINAL_STATES, JobState
from ..worker.pruner import DEFAULT_PRUNE_LIMIT, RETENTION_DEFAULTS, parse_age
from .common import BadUsage, CLIState, make_console, opened

__all__ = ["key_limit", "limit", "limits", "pause", "prune", "resume"]

_FINISHED = [str(s) for s in FINISHED_STATES]


def _ages(states: tuple[str, ...], older_than: str | None) -> dict[JobState, float]:
    """{state: seconds} for the states asked (default: all finished ones), at
    --older-than or else each state's default retention."""
    chosen = states or tuple(_FINISHED)
    try:
        if older_than is not None:
            age = parse_age(older_than, "--older-than")
            return {JobState(s): age for s in chosen}
        return {JobState(s): parse_age(RETENTION_DEFAULTS[s], s) for s in chosen if RETENTION_DEFAULTS[s] is not None}
    except ConfigError as exc:
        raise BadUsage(str(exc)) from None


def _summary(counts: dict[JobState, int]) -> str:
    return ", ".join(f"{s} {counts.get(JobState(s), 0)}" for s in _FINISHED if JobState(s) in counts)


@click.command()
@click.option("--state", "states", multiple=True, type=click.Choice(_FINISHED),
              help="Only jobs in this finished state (repeatable; default: all three).")
@click.option("--older-than", metavar="AGE",
              help="Finished longer ago than this: 90s, 30m, 12h, 7d, 2w (default: each state's default retention: "
                   + ", ".join(f"{k} {v}" for k, v in RETENTION_DEFAULTS.items()) + ").")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.option("--batch", type=click.IntRange(min=1, max=100_000), default=DEFAULT_PRUNE_LIMIT, show_default=True,
              help="Jobs per statement (each one short transaction).")
@click.pass_obj
def prune(state: CLIState, states: tuple[str, ...], older_than: str | None, dry_run: bool, batch: int) -> None:
    """Delete finished jobs (and their attempts) older than their retention, oldest
    first, in batches that never block running workers. Queued and running jobs
    are never touched."""
    ages = _ages(states, older_than)
    assert set(ages) <= TERMINAL_STATES
    with opened(state) as app:
        store = app.store
        waiting = store.prunable(ages)
        total = sum(waiting.values())
        if dry_run:
            click.echo(f"would prune {total} job(s): {_summary(waiting)}")
            return
        done: dict[JobState, int] = {}
        console = make_console(stderr=True)
        with Progress(TextColumn("pruning"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=True, disable=total <= batch) as bar:
            task = bar.add_task("prune", total=total)
            while True:
                gone = store.prune(ages, batch)
                for k, v in gone.items():
                    done[k] = done.get(k, 0) + v
                bar.advance(task, sum(gone.values()))
                if sum(gone.values()) < batch:
                    break
    click.echo(f"pruned {sum(done.values())} job(s): {_summary({**dict.fromkeys(ages, 0), **done})}")


@click.command()
@click.argument("queue")
@click.pass_obj
def pause(state: CLIState, queue: str) -> None:
    """Pause QUEUE: from their next claim round on, no worker claims its jobs;
    running jobs finish. Undo with `tether resume QUEUE`."""
    with opened(state) as app:
        app.pause(queue)
        paused = app.store.paused_queues()
        unheard = _unheard_of(app, queue)
    click.echo(f"queue {queue}: paused (paused now: {visible(', '.join(paused))})")
    _warn_unheard_of(queue, unheard)


@click.command()
@click.argument("queue")
@click.pass_obj
def resume(state: CLIState, queue: str) -> None:
    """Resume a paused QUEUE."""
    with opened(state) as app:
        app.resume(queue)
        paused = app.store.paused_queues()
    click.echo(f"queue {queue}: resumed (paused now: {visible(', '.join(paused)) or 'none'})")


@click.command()
@click.argument("queue")
@click.option("--concurrency", type=int, metavar="N", help="At most N of its jobs running at once, on all workers.")
@click.option("--rate", metavar="COUNT/PERIOD",
              help="At most COUNT of its jobs started in any PERIOD: seconds or a duration (100/60, 100/1m).")
@click.pass_obj
def limit(state: CLIState, queue: str, concurrency: int | None, rate: str | None) -> None:
    """Set QUEUE's limits, enforced in the claim for every worker: both at once,
    as app.configure_queue does (an option left out lifts that limit; neither
    given lifts both)."""
    parsed = _rate_option(rate)
    with opened(state) as app:
        stored = app.configure_queue(queue, concurrency=concurrency, rate=parsed)
        unheard = _unheard_of(app, queue) if stored.concurrency is not None or stored.rate_limit is not None else None
    if stored.concurrency is None and stored.rate_limit is None:
        click.echo(f"queue {queue}: limits lifted (no concurrency or rate limit)")
    else:
        click.echo(f"queue {queue}: {fmt_limits(stored)}")
    _warn_unheard_of(queue, unheard)


def _rate_option(rate: str | None) -> tuple[int, float] | None:
    """--rate COUNT/PERIOD as configure_queue's and configure_limit's rate=."""
    if rate is None:
        return None
    count, period = parse_rate(rate, "--rate")
    return count, parse_age(period, "--rate's PERIOD")


@click.command("key-limit")
@click.argument("pattern")
@click.option("--concurrency", type=int, metavar="N", help="At most N jobs of each matching key running at once.")
@click.option("--rate", metavar="COUNT/PERIOD",
              help="At most COUNT jobs of each matching key started in any PERIOD (10/1s, 100/1m).")
@click.pass_obj
def key_limit(state: CLIState, pattern: str, concurrency: int | None, rate: str | None) -> None:
    """Set per-key limits for the limit keys PATTERN matches ('*': any
    characters; each key its own limits), as app.configure_limit does: both at
    once (an option left out lifts that limit; neither given removes the
    pattern). A key takes its most specific matching pattern's limits."""
    parsed = _rate_option(rate)
    with opened(state) as app:
        stored = app.configure_limit(pattern, concurrency=concurrency, rate=parsed)
    if stored.concurrency is None and stored.rate_limit is None:
        click.echo(f"key pattern {visible(pattern)}: removed (no concurrency or rate limit)")
    else:
        click.echo(f"key pattern {visible(pattern)}: {fmt_key_limits(stored)}")


@click.command()
@click.pass_obj
def limits(state: CLIState) -> None:
    """Show the queue limits and the per-key limit patterns, with what counts
    against each now (app.limits())."""
    with opened(state) as app:
        found = app.limits()
    if not found.queues and not found.keys:
        click.echo("no limits (tether limit QUEUE ..., tether key-limit PATTERN ...)")
    for q in found.queues:
        click.echo(f"queue {visible(q.queue)}: {fmt_limits(q)}")
    for k in found.keys:
        click.echo(f"key pattern {visible(k.pattern)}: {fmt_key_limits(k)}")


def _unheard_of(app: Tether, queue: str) -> list[str] | None:
    """None when QUEUE is one the database knows of: a live worker serves it,
    a job or a schedule is in it. Otherwise the queues it does know, sorted, so
    a misspelt name is pointed out rather than silently set on a queue nothing
    uses. Live workers are asked first: the job counts read the whole table."""
    store = app.store
    served = {q for w in store.list_workers(live_only=True) for q in w.queues}
    if queue in served:
        return None
    scheduled = {s.queue for s in store.list_schedules()}
    if queue in scheduled:
        return None
    in_use = {q for (q, _state) in store.stats().counts}
    if queue in in_use:
        return None
    return sorted(served | scheduled | in_use)


def _warn_unheard_of(queue: str, known: list[str] | None) -> None:
    if known is None:
        return
    click.echo(f"note: no live worker serves queue {queue!r} and no job or schedule is in it; "
               f"check the name (queues in use: {visible(', '.join(known)) or 'none'})", err=True)
