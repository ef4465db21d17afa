"""The dashboard's workflow and batch pages (issue 42), over both backends
through Starlette's test client: a run drawn as an inline SVG DAG (a box per
step with its state's class and a link to its job, a curve per dependency),
its steps' table, a batch's progress, a job's page linking to its workflow or
batch, 404 and 400, the login. Step and workflow names carry ``<script>``:
they must show escaped."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

from tether import JobContext, JobState, Tether
from tether.dashboard.dag import MAX_DRAWN, dag
from tether.store.flows import StepInfo
from tether.workflows import WorkflowRun

from . import test_dashboard_jobs as _jobs
from .dashboard_seed import XSS
from .test_dashboard import _client

#: the fixtures: an app on each backend, and a client logged in to its dashboard
app, client = _jobs.app, _jobs.client

ESCAPED = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"


def diamond(app: Tether) -> WorkflowRun:
    """fetch -> (XSS, parse) -> report; fetch run: succeeded, the middle two queued, report waiting."""
    @app.task(name="step", queue="flows")
    def step(ctx: JobContext, **kwargs: object) -> None: ...

    wf = app.workflow(f"import {XSS}")
    a = wf.add(step.spec(), name="fetch")
    b = wf.add(step.spec(), after=[a], name=XSS)
    c = wf.add(step.spec(), after=[a], name="parse")
    wf.add(step.spec(), after=[b, c], name="report", on_failure="run")
    run = wf.enqueue()
    assert [d.job_id for d in app.drain(queues=["flows"], max_jobs=1)] == [run.jobs["fetch"]]
    return run


def _boxes(html: str) -> list[tuple[str, str, str]]:
    """(job id, state, step) of each box of the drawing."""
    return re.findall(r'<a class="dag-step s-(\w+)" href="/jobs/(\d+)" data-step="([^"]*)"', html)


def test_a_workflow_page_draws_its_dag(app: Tether, client: TestClient) -> None:
    run = diamond(app)
    page = client.get(f"/workflows/{run.id}")
    assert page.status_code == 200, page.text
    svg = page.text.split('<svg class="dag"', 1)[1].split("</svg>", 1)[0]
    boxes = {step: (state, int(job)) for state, job, step in _boxes(svg)}
    assert boxes == {"fetch": ("succeeded", run.jobs["fetch"]), ESCAPED: ("queued", run.jobs[XSS]),
                     "parse": ("queued", run.jobs["parse"]), "report": ("waiting", run.jobs["report"])}
    assert svg.count('<path class="dag-edge"') == 4
    assert "<script" not in svg and XSS not in page.text and page.text.count(ESCAPED) >= 3  # title, box, table
    # layers by depth: fetch left, the middle two one column right (stacked), report after them
    xs = {m[0]: int(m[1]) for m in re.findall(r'data-step="([^"]*)" data-state="\w+">\s*<title>[^<]*</title>\s*'
                                              r'<rect x="(\d+)"', svg)}
    assert xs["fetch"] < xs["parse"] == xs[ESCAPED] < xs["report"]
    table = page.text.split('<table class="steps">', 1)[1]
    assert f'<a href="/jobs/{run.jobs["report"]}">' in table and "fetch, " not in table
    assert f"<td>{ESCAPED}, parse</td><td>run</td>" in table


def test_a_batch_page_shows_its_progress_and_callbacks(app: Tether, client: TestClient) -> None:
    @app.task(name="member")
    def member(ctx: JobContext, i: int) -> None: ...

    @app.task(name="done")
    def done(ctx: JobContext) -> None: ...

    with app.batch(on_complete=done.spec(), on_success=done.spec()) as batch:  # type: ignore[attr-defined]
        for i in range(4):
            batch.add(member.spec(i=i))  # type: ignore[attr-defined]
    app.cancel(batch.jobs[0])
    assert len(app.drain(queues=["default"], max_jobs=2)) == 2
    page = client.get(f"/batches/{batch.id}")
    assert page.status_code == 200, page.text
    assert '<p id="batch-done"><b>3</b> of <b>4</b> member(s) ended</p>' in page.text
    assert '<progress id="batch-progress" max="4" value="3">' in page.text
    segs = dict(re.findall(r'data-state="(\w+)" data-count="(\d+)"', page.text))
    assert segs == {"queued": "1", "succeeded": "2", "cancelled": "1"}
    assert f'<a id="on-complete" href="/jobs/{batch.callbacks["on_complete"]}">' in page.text
    assert f'<a id="on-success" href="/jobs/{batch.callbacks["on_success"]}">' in page.text
    # a member's and a callback's pages link to the batch; a workflow step's to its run; a plain job's to none
    for job_id in (batch.jobs[1], batch.callbacks["on_success"]):
        assert f'<a id="job-batch" href="/batches/{batch.id}">' in client.get(f"/jobs/{job_id}").text
    run = diamond(app)
    step = client.get(f"/jobs/{run.jobs['report']}").text
    assert f'<a id="job-workflow" href="/workflows/{run.id}">' in step and "job-batch" not in step
    plain_id = done.enqueue()  # type: ignore[attr-defined]
    plain = client.get(f"/jobs/{plain_id}").text
    assert "job-workflow" not in plain and "job-batch" not in plain
    # the one query behind those links
    assert [app.store.job_flow(i) for i in (batch.jobs[3], batch.callbacks["on_complete"], run.jobs["fetch"],
                                            plain_id, plain_id + 1000)] == [
        (None, batch.id), (None, batch.id), (run.id, None), (None, None), (None, None)]


def test_unknown_and_malformed_ids_and_the_login(app: Tether, client: TestClient) -> None:
    run = diamond(app)
    for kind in ("workflows", "batches"):
        assert client.get(f"/{kind}/{run.id + 1000}").status_code == 404
        for bad in ("abc", "-1", "1.5", "99999999999999999999999", "%3Cscript%3E"):
            r = client.get(f"/{kind}/{bad}")
            assert r.status_code == 400 and "<script>" not in r.text, (kind, bad)
        assert client.post(f"/{kind}/{run.id}").status_code == 405
    with _client(app) as anonymous:
        for path in (f"/workflows/{run.id}", "/batches/1"):
            r = anonymous.get(path)
            assert r.status_code == 303 and r.headers["location"].startswith("/login?next="), path
            assert "import" not in r.text
    assert app.get_job(run.jobs["fetch"]).state is JobState.SUCCEEDED  # type: ignore[union-attr]


def test_the_layout_puts_steps_in_layers_by_depth_and_stops_drawing_past_its_limit() -> None:
    def s(name: str, *after: str, state: JobState | None = JobState.QUEUED) -> StepInfo:
        return StepInfo(name=name, job_id=len(name), state=state, after=after, on_failure="cancel")

    # "late" is added first but waits for "c": it still goes right of it
    drawn = dag([s("late", "c"), s("a"), s("b", "a"), s("c", "a", "b", state=None), s("d")])
    x = {b.step.name: b.x for b in drawn.boxes}
    assert x["a"] == x["d"] < x["b"] < x["c"] < x["late"] and len(drawn.edges) == 4
    assert {b.step.name: b.state for b in drawn.boxes}["c"] == "deleted"
    assert all(b.x >= 0 and b.x + drawn.box_w <= drawn.width and b.y + drawn.box_h <= drawn.height
               for b in drawn.boxes)
    many = dag([s(f"s{i}") for i in range(MAX_DRAWN + 1)])
    assert not many.drawn and many.boxes == []
