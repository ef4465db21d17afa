"""``tether workflow RUN_ID`` (issue 42): a workflow run's steps, each with its
job, its state and the steps it waits for."""

from __future__ import annotations

import json

import click

from ..config import redact_url
from ..errors import JobNotFound
from .common import CLIState, JobId, make_console, opened

__all__ = ["workflow"]


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
