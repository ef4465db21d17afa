"""Due jobs whose task no live worker knows are visible (issue 17, point 2):
``tether status``, the dashboard's overview and a Prometheus gauge name the
queue and the task, on both backends. (The worker's own warning log line is
tested with the service in ``test_unknown_tasks.py``.)"""

from __future__ import annotations

from collections.abc import Callable

from click.testing import CliRunner
from starlette.testclient import TestClient

from tether import Tether
from tether.cli.main import cli
from tether.dashboard import create_app
from tether.metrics import Metrics
from tether.model import NewJob, WorkerInfo
from tether.store import Store

from .test_dashboard import HOSTS, TOKEN, login
from .test_metrics import value


def _waiting(app: Tether) -> None:
    """A worker that knows "greet" and not "greeet" (a typo), and a job of each."""
    store: Store = app.store
    now = store.db_now()
    store.register_worker(WorkerInfo(id="host-1-w", host="host", pid=1, proc_start=None, started_at=now,
                                     last_seen=now, queues=["default"], concurrency=2, tasks=["greet"]))
    store.enqueue([NewJob(task="greet", args_json="{}"), NewJob(task="greeet", args_json="{}"),
                   NewJob(task="greeet", args_json="{}")])


def test_status_lists_the_tasks_no_live_worker_knows(make_app: Callable[..., Tether], db_url: str) -> None:
    _waiting(make_app())
    r = CliRunner().invoke(cli, ["-d", db_url, "status"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    section = r.stdout.split("tasks no live worker knows", 1)
    assert len(section) == 2, r.stdout
    rows = [line.split() for line in section[1].split("workers", 1)[0].splitlines()]
    assert ["default", "greeet", "2"] in [row[:3] for row in rows], r.stdout
    assert not any("greet" in row for row in rows), r.stdout
    assert "unknown_task_grace" in r.stdout


def test_status_names_a_queue_no_live_worker_serves(make_app: Callable[..., Tether], db_url: str) -> None:
    """The README's `queue="images"` job with workers on default only: the
    task is registered, and status said to start workers that register it.
    It now names the queue nobody serves."""
    app = make_app()
    _waiting(app)
    app.store.enqueue([NewJob(task="greet", args_json="{}", queue="images")])
    r = CliRunner().invoke(cli, ["-d", db_url, "status"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "no live worker serves queue(s) images: add them to a worker's -q" in text, r.stdout
    assert "serves queue(s) default" not in text and "default," not in text


def test_status_says_nothing_of_unknown_tasks_when_every_task_is_known(
    make_app: Callable[..., Tether], db_url: str
) -> None:
    app = make_app()
    app.store.enqueue([NewJob(task="greet", args_json="{}")])
    now = app.store.db_now()
    app.store.register_worker(WorkerInfo(id="host-1-w", host="host", pid=1, proc_start=None, started_at=now,
                                         last_seen=now, queues=["default"], concurrency=2, tasks=["greet"]))
    r = CliRunner().invoke(cli, ["-d", db_url, "status"], catch_exceptions=False)
    assert r.exit_code == 0 and "no live worker knows" not in r.stdout, r.output


def test_the_dashboard_overview_lists_them_with_a_link_to_the_jobs(make_app: Callable[..., Tether]) -> None:
    app = make_app()
    _waiting(app)
    with TestClient(create_app(app, token=TOKEN, allowed_hosts=HOSTS), follow_redirects=False) as c:
        login(c)
        page = c.get("/").text
    assert "no live worker knows their task" in page
    assert "/jobs?queue=default&amp;task=greeet&amp;state=queued" in page
    assert "task=greet&amp;" not in page


def test_a_gauge_counts_them_by_queue_and_task(make_app: Callable[..., Tether]) -> None:
    app = make_app()
    m = Metrics(depth_cache=0).attach(app).watch_store(app.store)
    _waiting(app)
    assert value(m, "tether_unknown_task_jobs", queue="default", task="greeet") == 2
    assert m.registry.get_sample_value("tether_unknown_task_jobs", {"queue": "default", "task": "greet"}) is None
    now = app.store.db_now()
    app.store.register_worker(WorkerInfo(id="host-2-w", host="host", pid=2, proc_start=None, started_at=now,
                                         last_seen=now, queues=["default"], concurrency=2, tasks=["greeet"]))
    assert m.registry.get_sample_value("tether_unknown_task_jobs", {"queue": "default", "task": "greeet"}) is None

