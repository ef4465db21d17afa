"""The ``tether`` command: a click group whose commands are thin shells over the
app and its store; renderings live in ``render``, the demo in ``demo``.

Every error a user can provoke ends in one line on stderr and a non-zero exit:
2 when the request or the settings are wrong (bad flags, timers, ``--app``,
database URL, unknown task, missing schema), 1 when a sound request failed (no
such job, a finished job cannot be cancelled). ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import time
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from .. import __version__
from ..config import DEFAULT_DATABASE_URL, redact_url
from ..display import fmt_key_limits, visible
from ..errors import JobNotFound, PayloadError
from ..model import TERMINAL_STATES, Job
from ..payload import unique_keys
from .common import (
    EXIT_FAILURE,
    PUBLISH_OPTION,
    BadUsage,
    CLIState,
    JobId,
    Seconds,
    configure_app,
    load_app,
    make_console,
    one_line_errors,
    opened,
    publish_through,
    quiet_driver_logs,
    require_database,
)
from .worker_cmd import run_worker, worker_options

if TYPE_CHECKING:
    from rich.console import RenderableType

# rich (about fifty modules) and the renderings are imported by the commands
# that print with them: `tether worker` and `tether --help` never load them

__all__ = ["cli", "main"]


#: commands defined in modules of their own, imported only when run: ``tether
#: worker`` starts without the chaos harness, the server or the dashboard
#: (about a tenth of a second of CPU per worker start)
LAZY_COMMANDS = {
    "chaos": "chaos_cmd", "prune": "control_cmd", "pause": "control_cmd", "resume": "control_cmd",
    "limit": "control_cmd", "key-limit": "control_cmd", "limits": "control_cmd", "dashboard": "dashboard_cmd", "server": "server_cmd", "schedules": "schedules_cmd",
    "jobs": "many_cmd", "cancel": "many_cmd", "retry": "many_cmd", "delete": "many_cmd", "purge": "many_cmd",
    "rerun": "many_cmd", "workflow": "flows_cmd", "batch": "flows_cmd",
}
#: what ``tether --help`` lists for them (the first paragraph of each one's
#: docstring, which click shortens the same way), so that the listing imports
#: none of them: the server's and the dashboard's modules bring starlette and
#: uvicorn. tests/test_cli.py checks each against its command.
LAZY_HELP = {
    "batch": "Show a batch: its members' counts by state, and its callbacks' jobs.",
    "chaos": "Run workers under faults and check the contract (I1-I9) held.",
    "dashboard": "Serve the dashboard: queues, jobs, attempts, workers, recoveries; cancel and retry.",
    "limit": "Set QUEUE's limits, enforced in the claim for every worker: both at once, as app.configure_queue "
             "does (an option left out lifts that limit; neither given lifts both).",
    "key-limit": "Set per-key limits for the limit keys PATTERN matches ('*': any characters; each key its own "
                 "limits), as app.configure_limit does: both at once (an option left out lifts that limit; neither "
                 "given removes the pattern). A key takes its most specific matching pattern's limits.",
    "limits": "Show the queue limits and the per-key limit patterns, with what counts against each now "
              "(app.limits()).",
    "pause": "Pause QUEUE: from their next claim round on, no worker claims its jobs; running jobs finish. Undo "
             "with `tether resume QUEUE`.",
    "prune": "Delete finished jobs (and their attempts) older than their retention, oldest first, in batches that "
             "never block running workers. Queued and running jobs are never touched.",
    "resume": "Resume a paused QUEUE.",
    "schedules": "Periodic schedules: cron, time zone, next tick, last tick fired and its job; those added at "
                 "run time and paused ones marked. Subcommands manage them at run time.",
    "jobs": "List jobs, newest first, with filters (combined: all must hold); prints the cursor of the next page "
            "(--after).",
    "cancel": "Cancel jobs, by id or by filter: queued ones at once, running ones at their worker's next heartbeat "
              "(finished ones are left).",
    "retry": "Send dead or cancelled jobs back to their queue, by id or by filter (with --transport NATS: and "
             "publish them there, marked as retries).",
    "delete": "Delete finished jobs (and their attempts), by id or by filter; a filter that matches queued or "
              "running jobs is refused (add --state).",
    "purge": "Cancel every queued job of QUEUE (running ones go on).",
    "rerun": "Run a finished job again: a new job with its task, args and options.",
    "workflow": "Show a workflow run: its steps, each step's job and state, and what each waits for.",
    "server": "Serve the database (--database) over HTTP to workers and producers that hold no database "
              "credentials: `tether worker --server http://HOST:PORT --token T`. It prunes the database too "
              "(--retention): its remote workers do not.",
}


class TetherGroup(click.Group):
    """Turns tether's own errors, and anything unexpected, into one clean line."""

    _listing = False

    def invoke(self, ctx: click.Context) -> Any:
        with one_line_errors(lambda: _state(ctx).debug, "tether --debug ..."):
            return super().invoke(ctx)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True  # the lazy commands as their LAZY_HELP, not imported
        try:
            super().format_commands(ctx, formatter)
        finally:
            self._listing = False

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = LAZY_COMMANDS.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            if self._listing:
                return click.Command(cmd_name, help=LAZY_HELP[cmd_name])
            found = getattr(importlib.import_module(f"{__package__}.{module}"), cmd_name.replace("-", "_"))
            assert isinstance(found, click.Command)
            self.add_command(found, cmd_name)
        return super().get_command(ctx, cmd_name)


def _state(ctx: click.Context) -> CLIState:
    state = ctx.find_object(CLIState)
    return state if state is not None else CLIState(DEFAULT_DATABASE_URL, False)


pass_state = click.make_pass_decorator(CLIState)

APP_OPTION = click.option(
    "--app", "-a", "app_ref", required=True, envvar="TETHER_APP", metavar="MODULE:ATTR",
    help="The Tether instance, e.g. myproject.jobs:app (env TETHER_APP).",
)


@click.group(cls=TetherGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--database", "-d", envvar="TETHER_DATABASE_URL", default=DEFAULT_DATABASE_URL, show_default=True,
    metavar="URL", help="sqlite:///path.db or postgresql://user@host/db (env TETHER_DATABASE_URL).",
)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(__version__, prog_name="tether")
@click.pass_context
def cli(ctx: click.Context, database: str, debug: bool) -> None:
    """tether: a job queue in which the database owns every job."""
    ctx.obj = CLIState(database=database, debug=debug)
    ctx.with_resource(quiet_driver_logs())


# -- schema -----------------------------------------------------------------------------
@cli.command()
@pass_state
def migrate(state: CLIState) -> None:
    """Create or upgrade tether's tables."""
    with opened(state, create=True) as app:
        applied = app.migrate()
    where = redact_url(state.database)
    if applied:
        for name in applied:
            click.echo(f"applied {name}")
        click.echo(f"{where}: {len(applied)} migration(s) applied")
    else:
        click.echo(f"{where}: already up to date")


# -- workers ------------------------------------------------------------------------------
@cli.command()
@APP_OPTION
@worker_options
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes, each with --concurrency slots, under one supervisor that restarts them "
                   "(for CPU-bound def handlers: one process runs Python code on one core).")
@click.pass_context
def worker(ctx: click.Context, /, app_ref: str, processes: int, **options: Any) -> None:
    """Run a worker until SIGTERM/SIGINT (first: finish running jobs; second: stop now), or with --burst
    until no job is due."""
    state: CLIState = ctx.obj
    database = state.database if _database_on_command_line(ctx) else None
    if processes > 1:
        from .processes import run_processes

        code = run_processes(processes, app_ref=app_ref, database=database, debug=state.debug, options=options)
        if code:
            raise click.exceptions.Exit(code)
        return
    app = load_app(app_ref)
    run_worker(app, app_ref, database=database, **options)


def _database_on_command_line(ctx: click.Context) -> bool:
    """``--database`` overrides the URL an app was built with only when given
    explicitly; a ``Tether()`` that reads TETHER_DATABASE_URL already has it."""
    root = ctx.find_root()
    return root.get_parameter_source("database") is ParameterSource.COMMANDLINE


# -- producers ---------------------------------------------------------------------------
@cli.command()
@click.argument("task_name", metavar="TASK")
@APP_OPTION
@click.option("--args", "args_json", default="{}", show_default=True, metavar="JSON",
              help='Keyword arguments as a JSON object, e.g. \'{"user_id": 7}\'.')
@click.option("--queue", help="Override the task's queue.")
@click.option("--priority", type=int, help="Higher runs first.")
@click.option("--delay", type=Seconds(allow_zero=True), help="Seconds before the job is due.")
@click.option("--max-attempts", type=click.IntRange(min=1), help="Attempts before the job ends dead.")
@click.option("--dedup-key", help="At most one queued or running job per key.")
@click.option("--dedup-for", metavar="DURATION", help="Keep --dedup-key taken this long after the job ended (1h).")
@click.option("--expires", metavar="DURATION", help="Never start the job if not started within this (10m).")
@PUBLISH_OPTION
@click.pass_context
def enqueue(
    ctx: click.Context, task_name: str, app_ref: str, args_json: str, queue: str | None, priority: int | None,
    delay: float | None, max_attempts: int | None, dedup_key: str | None, dedup_for: str | None,
    expires: str | None, transport: str | None,
) -> None:
    """Enqueue TASK (a name registered on the app); prints the job id.

    With a NATS transport (the app's own, or --transport) the job is published
    once committed; a failed publish leaves it to the workers' sweep."""
    state: CLIState = ctx.obj
    args = _json_object(args_json)
    app = load_app(app_ref)
    try:
        configure_app(app, url=state.database if _database_on_command_line(ctx) else None)
        publish_through(app, transport)
        task = app.get_task(task_name)
        require_database(app)
        options = {k: v for k, v in {"queue": queue, "priority": priority, "delay": delay,
                                     "max_attempts": max_attempts, "dedup_key": dedup_key, "dedup_for": dedup_for,
                                     "expires": expires}.items() if v is not None}
        job_id = task.using(**options).enqueue(**task.parse_args(args))  # typed args from their JSON
    finally:
        app.close()
    held = " (a duplicate: a job held its dedup key)" if job_id.duplicate else ""
    click.echo(f"enqueued {task.name} on queue {options.get('queue', task.options.queue)}: job {job_id}{held}",
               err=True)
    click.echo(str(job_id))


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise BadUsage(f"--args is not valid JSON: {exc}") from None
    except ValueError as exc:  # a key given twice
        raise PayloadError(f"--args: {exc}") from None
    if not isinstance(value, dict):
        raise PayloadError(
            f"--args must be a JSON object of keyword arguments (like '{{\"x\": 1}}'), got {type(value).__name__}"
        )
    return value


# -- inspection and admin -------------------------------------------------------------------
@cli.command()
@click.argument("job_id", type=JobId())
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--tracebacks", "-t", is_flag=True, help="Also print each failed attempt's traceback.")
@click.option("--follow", "-f", is_flag=True, help="Keep the view live (progress bar, attempts) until the job ends.")
@click.option("--interval", type=Seconds(), default=1.0, show_default=True, help="Refresh period for --follow.")
@pass_state
def job(state: CLIState, job_id: int, as_json: bool, tracebacks: bool, follow: bool, interval: float) -> None:
    """Show one job: its details, progress and attempts history."""
    from rich.live import Live

    from . import render
    with opened(state) as app:
        def view() -> tuple[Job, RenderableType]:
            found = app.get_job(job_id)
            if found is None:
                raise JobNotFound(f"no job {job_id} in {redact_url(state.database)}")
            return found, render.job_details(found, app.store.db_now(), tracebacks=tracebacks)

        found, shown = view()
        if as_json:
            click.echo(render.job_json(found))
            return
        console = make_console()
        if not follow or found.state in TERMINAL_STATES:
            console.print(shown)
            return
        with Live(shown, console=console, auto_refresh=False) as live, contextlib.suppress(KeyboardInterrupt):
            while found.state not in TERMINAL_STATES:
                time.sleep(interval)
                found, shown = view()
                live.update(shown, refresh=True)


@cli.command()
@click.option("--watch", "-w", is_flag=True, help="Keep the view live until Ctrl-C.")
@click.option("--interval", type=Seconds(), default=2.0, show_default=True, help="Refresh period for --watch.")
@pass_state
def status(state: CLIState, watch: bool, interval: float) -> None:
    """Jobs by queue and state, the oldest due job per queue, paused queues, queue
    limits and what counts against them, jobs whose task no live worker knows,
    and live workers."""
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    from . import render
    with opened(state) as app:
        def view() -> RenderableType:
            stats = app.store.stats()
            parts: list[RenderableType] = [
                Text.assemble((visible(redact_url(state.database)), "bold"),
                              f"  (database time {render.fmt_time(stats.now)})"),
                render.queues_table(stats) if stats.counts else "no jobs yet",
            ]
            paused = app.store.paused_queues()
            if paused:
                parts.append(Text.assemble(("paused:", "bold yellow"), " ", visible(", ".join(paused)),
                                           " (no new claims; `tether resume`)"))
            parts += [render.limits_line(lim) for lim in app.store.queue_limits()]
            parts += [Text.assemble(("key limits:", "bold cyan"), " ", (visible(k.pattern), "bold"), " ",
                                    fmt_key_limits(k)) for k in app.store.key_limits()]
            if stats.unknown:
                parts += [render.unknown_tasks_table(stats), render.unknown_tasks_hint(stats)]
            if stats.workers:
                parts += [render.workers_table(stats.workers, stats.now),
                          "[dim]a worker silent for longer than its lease TTL is probably gone; "
                          "the reaper recovers its jobs[/dim]"]
            else:
                parts.append("no live workers")
            return Group(*parts)

        console = make_console()
        if not watch:
            console.print(view())
            return
        with Live(view(), console=console, auto_refresh=False) as live, contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(interval)
                live.update(view(), refresh=True)


# -- the demo -------------------------------------------------------------------------------
@cli.command()
@click.option("--jobs", "n_jobs", type=click.IntRange(min=1, max=500), default=30, show_default=True)
@click.option("--workers", "n_workers", type=click.IntRange(min=2, max=16), default=3, show_default=True,
              help="Worker processes (one of them is killed).")
@click.option("--keep", type=click.Path(file_okay=False), help="Run in this directory and keep it.")
def demo(n_jobs: int, n_workers: int, keep: str | None) -> None:
    """Kill a worker mid-job on a fresh SQLite database and watch tether recover."""
    from .demo import run_demo

    ok = run_demo(n_jobs=n_jobs, n_workers=n_workers, keep=keep, console=make_console())
    if not ok:
        raise click.exceptions.Exit(EXIT_FAILURE)


def main() -> None:
    cli(prog_name="tether")
