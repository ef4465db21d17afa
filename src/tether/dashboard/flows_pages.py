"""The workflow and batch pages (issue 42), for ``server.create_app``.

- ``/workflows/{id}``: the run drawn as a DAG (``dag.dag``: inline SVG, a box
  per step coloured by its job's state and linking to the job's page, a
  curve per dependency), then a table of its steps.
- ``/batches/{id}``: its members' counts by state as a progress bar
  (``dag.stacked``), done of total, and its callbacks' jobs.

GET only, behind the dashboard's login (server.page). An id that is not a
whole number is a 400; an unknown one a 404. ``flow_of`` gives a job's page
its workflow or batch: indexed point lookups (a step's row by its job id,
the job's batch edge, the batches' callback indexes).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from ..app import Tether
from ..numbers import BadNumber, parse_job_id
from .dag import dag, stacked
from .security import Session

__all__ = ["FlowsPages"]

Render = Callable[..., Response]


class FlowsPages:
    """The pages' handlers, over ``tether``'s database, drawn with the dashboard's ``render``."""

    def __init__(self, tether: Tether, render: Render) -> None:
        self.tether = tether
        self.render = render

    def _id(self, request: Request, session: Session, what: str) -> int | Response:
        text = request.path_params["flow_id"]
        try:
            return parse_job_id(text)
        except BadNumber:
            return self.render(request, session, "error.html", status=400,
                               message=f"no {what} {text[:40]!r}: a {what} id is a whole number")

    async def workflow(self, request: Request, session: Session) -> Response:
        run_id = self._id(request, session, "workflow")
        if isinstance(run_id, Response):
            return run_id
        found = await run_in_threadpool(self.tether.get_workflow, run_id)
        if found is None:
            return self.render(request, session, "error.html", status=404, message=f"no workflow {run_id}")
        drawing = await run_in_threadpool(dag, found.steps)
        return await run_in_threadpool(lambda: self.render(request, session, "workflow.html", wf=found, dag=drawing))

    async def batch(self, request: Request, session: Session) -> Response:
        batch_id = self._id(request, session, "batch")
        if isinstance(batch_id, Response):
            return batch_id
        found = await run_in_threadpool(self.tether.get_batch, batch_id)
        if found is None:
            return self.render(request, session, "error.html", status=404, message=f"no batch {batch_id}")
        return self.render(request, session, "batch.html", batch=found, bar=stacked(found.counts))

    def flow_of(self, job_id: int) -> tuple[int | None, int | None]:
        """(its workflow run, its batch: as a member or a callback) of a job; Nones for a plain job."""
        store = self.tether.store
        run = store.job_workflow(job_id)
        return run, None if run is not None else store.job_batch(job_id, callback=True)
