"""``tether schedules``: list the schedules, and manage them at run time
(``add``, ``pause``, ``resume``, ``remove``, ``trigger``; issue 44), as
``app.add_schedule`` and its siblings do."""

from __future__ import annotations

import click

from ..cron import MAX_CATCH_UP
from ..periodic import DEFAULT_CATCH_UP
from .common import PUBLISH_OPTION, CLIState, configure_app, load_app, make_console, opened, require_database
from .main import APP_OPTION, _database_on_command_line, _json_object, pass_state

__all__ = ["schedules"]


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def schedules(ctx: click.Context, as_json: bool) -> None:
    """Periodic schedules: cron, time zone, next tick, last tick fired and its job; those added at run time and
    paused ones marked. Subcommands manage them at run time."""
    if ctx.invoked_subcommand is not None:
        return
    from . import render

    state: CLIState = ctx.obj
    with opened(state) as app:
        found = app.store.list_schedules()
        now = app.store.db_now()
    if as_json:
        click.echo(render.schedules_json(found))
        return
    console = make_console()
    if not found:
        console.print("no schedules yet (a worker whose app declares @app.periodic tasks records them; "
                      "`tether schedules add` adds one at run time)")
        return
    console.print(render.schedules_table(found, now))
    if any(s.orphaned for s in found):
        console.print("[dim]orphaned: the app that synced last does not declare it; kept for its history, "
                      "fired only by workers that still do[/dim]")


@schedules.command()
@click.argument("name")
@click.argument("cron")
@click.option("--task", "task_name", required=True, help="The registered task each tick runs.")
@APP_OPTION
@click.option("--args", "args_json", default="{}", show_default=True, metavar="JSON",
              help="The task's keyword arguments, as a JSON object.")
@click.option("--timezone", default="UTC", show_default=True, help="The zone the cron is read in.")
@click.option("--catch-up", type=click.IntRange(0, MAX_CATCH_UP), default=DEFAULT_CATCH_UP, show_default=True,
              help="After every worker was down, fire at most this many missed ticks.")
@click.option("--overlap/--no-overlap", default=True, show_default=True,
              help="--no-overlap: skip a tick while the previous job is still queued or running.")
@click.pass_context
def add(ctx: click.Context, name: str, cron: str, task_name: str, app_ref: str, args_json: str, timezone: str,
        catch_up: int, overlap: bool) -> None:
    """Add schedule NAME at run time: each tick of CRON runs --task with --args (checked against the handler of
    the app --app), fired by the workers that run that task from its next tick on; no restart."""
    state: CLIState = ctx.find_object(CLIState)  # type: ignore[assignment]
    args = _json_object(args_json)
    app = load_app(app_ref)
    try:
        configure_app(app, url=state.database if _database_on_command_line(ctx) else None)
        require_database(app)
        app.add_schedule(name, cron, task=task_name, args=args, timezone=timezone, catch_up=catch_up,
                         overlap=overlap)
    finally:
        app.close()
    click.echo(f"schedule {name}: added ({cron} in {timezone}, task {task_name})")


@schedules.command()
@click.argument("name")
@pass_state
def pause(state: CLIState, name: str) -> None:
    """Pause schedule NAME: its ticks are not fired until `tether schedules resume NAME`."""
    with opened(state) as app:
        app.pause_schedule(name)
    click.echo(f"schedule {name}: paused")


@schedules.command()
@click.argument("name")
@pass_state
def resume(state: CLIState, name: str) -> None:
    """Resume schedule NAME at its next tick (the ticks missed while paused are not caught up)."""
    with opened(state) as app:
        app.resume_schedule(name)
    click.echo(f"schedule {name}: resumed")


@schedules.command()
@click.argument("name")
@pass_state
def remove(state: CLIState, name: str) -> None:
    """Remove schedule NAME, added at run time (a schedule declared in code can be paused, not removed)."""
    with opened(state) as app:
        app.remove_schedule(name)
    click.echo(f"schedule {name}: removed")


@schedules.command()
@click.argument("name")
@PUBLISH_OPTION
@pass_state
def trigger(state: CLIState, name: str, transport: str | None) -> None:
    """Fire one job of schedule NAME now, recorded as a manual tick; prints the job id."""
    with opened(state, transport=transport) as app:
        job_id = app.trigger_schedule(name)
    click.echo(f"schedule {name}: triggered job {job_id}", err=True)
    click.echo(str(job_id))
