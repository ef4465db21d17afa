"""``tether workflow RUN_ID`` and ``tether batch BATCH_ID`` (issue 42): a workflow
run's steps, each with its job, its state and the steps it waits for; a batch's
members' counts by state and its callbacks."""

from __future__ import annotations

import json

import click

from ..config import redact_url
from ..errors import JobNotFound
from .common import CLIState, JobId, make_console, opened

__all__ = ["batch", "workflow"]


@click.command()
@click.argument("run_id", type=JobId())
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def workflow(state: CLIState, run_id: int, as_json: bool) -> None:
    """Show a workflow run: its steps, each step's job and state, and what each waits for."""
    from rich.table import Table

    from .render import STATE_STYLE

    with opened(state) as app:
        found = app.get_workflow(run_id)
    if found is None:
        raise JobNotFound(f"no workflow run {run_id} in {redact_url(state.database)}")
    if as_json:
        click.echo(json.dumps({
            "id": found.id, "name": found.name, "created_at": found.created_at.isoformat(),
            "finished": found.finished,
            "steps": [{"name": s.name, "job_id": s.job_id, "state": None if s.state is None else str(s.state),
                       "after": list(s.after), "on_failure": s.on_failure} for s in found.steps],
        }))
        return
    table = Table(title=f"workflow {found.id} {found.name!r}" + (" (finished)" if found.finished else ""))
    for column in ("step", "job", "state", "after", "on failure"):
        table.add_column(column)
    for s in found.steps:
        shown = "(deleted)" if s.state is None else f"[{STATE_STYLE[s.state]}]{s.state}[/]"
        table.add_row(s.name, str(s.job_id), shown, ", ".join(s.after) or "-", s.on_failure)
    make_console().print(table)


@click.command()
@click.argument("batch_id", type=JobId())
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def batch(state: CLIState, batch_id: int, as_json: bool) -> None:
    """Show a batch: its members' counts by state, and its callbacks' jobs."""
    with opened(state) as app:
        found = app.get_batch(batch_id)
    if found is None:
        raise JobNotFound(f"no batch {batch_id} in {redact_url(state.database)}")
    counts = {str(s): n for s, n in sorted(found.counts.items())}
    if as_json:
        click.echo(json.dumps({
            "id": found.id, "created_at": found.created_at.isoformat(), "finished": found.finished,
            "finished_at": None if found.finished_at is None else found.finished_at.isoformat(),
            "total": found.total, "counts": counts,
            "on_complete": found.on_complete, "on_success": found.on_success,
        }))
        return
    shown = ", ".join(f"{s} {n}" for s, n in counts.items()) or "no members"
    console = make_console()
    console.print(f"batch {found.id}: {found.total} member(s): {shown}; "
                  + ("finished" if found.finished else "not finished"))
    for role in ("on_complete", "on_success"):
        job_id = getattr(found, role)
        if job_id is not None:
            console.print(f"  {role}: job {job_id}")
