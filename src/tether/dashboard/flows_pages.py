"""The workflow and batch pages (issue 42), for ``server.create_app``.

- ``/workflows/{id}``: the run drawn as a DAG (``dag.dag``: inline SVG, a box
  per step coloured by its job's state and linking to the job's page, a
  curve per dependency), then a table of its steps.
- ``/batches/{id}``: its members' counts by state as a progress bar
  (``dag.stacked``), done of total, and its callbacks' jobs.

GET only, behind the dashboard's login (server.page). An id that is not a
whole number is a 400; an unknown one a 404. ``flow_of`` gives a job's page
its workflow or batch in one query of index probes (the store's ``job_flow``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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

    async def _show(self, request: Request, session: Session, what: str, get: Callable[[int], Any],
                    template: str, draw: Callable[[Any], dict[str, Any]]) -> Response:
        """The page of the workflow or batch of the path: ``get(id)`` finds it, ``draw`` adds what is drawn."""
        text = request.path_params["flow_id"]
        try:
            flow_id = parse_job_id(text)
        except BadNumber:
            return self.render(request, session, "error.html", status=400,
                               message=f"no {what} {text[:40]!r}: a {what} id is a whole number")
        found = await run_in_threadpool(get, flow_id)
        if found is None:
            return self.render(request, session, "error.html", status=404, message=f"no {what} {flow_id}")
        # off the event loop: a run of a thousand steps is a thousand boxes to lay out and render
        return await run_in_threadpool(lambda: self.render(request, session, template, **draw(found)))

    async def workflow(self, request: Request, session: Session) -> Response:
        return await self._show(request, session, "workflow", self.tether.get_workflow, "workflow.html",
                                lambda wf: {"wf": wf, "dag": dag(wf.steps)})

    async def batch(self, request: Request, session: Session) -> Response:
        return await self._show(request, session, "batch", self.tether.get_batch, "batch.html",
                                lambda b: {"batch": b, "bar": stacked(b.counts)})

    def flow_of(self, job_id: int) -> tuple[int | None, int | None]:
        """(its workflow run, its batch: as a member or a callback) of a job; Nones for a plain job."""
        return self.tether.store.job_flow(job_id)
