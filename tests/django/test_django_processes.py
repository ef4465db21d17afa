"""``manage.py tether_worker --processes 2``: a supervisor whose worker
processes each set Django up and run the backend's tasks; with ``--burst``
they finish the queue and the supervisor exits 0. And ``--isolation process``
through the same command (the options are ``tether worker``'s)."""

from __future__ import annotations

from django.tasks import TaskResultStatus
from shop import tasks

from conftest import manage


def test_processes_run_the_backends_tasks(backend: str) -> None:
    results = [tasks.whoami.using(backend=backend, queue_name="default").enqueue(label=f"p{i}") for i in range(6)]
    done = manage("tether_worker", "--backend", backend, "--burst", "-q", "default", "--processes", "2",
                  "--no-prefetch", check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "2 worker processes of django TASKS" in out, out
    for result in results:
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL, out


def test_isolation_process_runs_a_task_in_a_child(backend: str) -> None:
    result = tasks.whoami.using(backend=backend, queue_name="default").enqueue(label="isolated")
    done = manage("tether_worker", "--backend", backend, "--burst", "-q", "default", "--isolation", "process",
                  "--max-tasks-per-child", "5", "--max-memory-per-child", "500MB", check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value["attempt"] == 1
