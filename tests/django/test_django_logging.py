"""``manage.py tether_worker``'s log under Django's own logging: each line
once, with DEBUG on (startproject's default, where Django's console handler
writes the 'django' loggers' records and passes them on to the root logger's,
tether's) and off (tether's handler alone writes them); and a project whose
LOGGING gives the root logger a handler keeps it."""

from __future__ import annotations

import pytest
from shop import tasks

from conftest import manage


@pytest.mark.parametrize("debug", ["1", "0"], ids=["debug", "no-debug"])
def test_worker_log_lines_are_written_once(debug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_DJANGO_DEBUG", debug)
    result = tasks.add.using(queue_name="callcmd").enqueue(a=1, b=2)
    done = manage("tether_worker", "--burst", "-q", "callcmd", "--no-prefetch", check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    for state in ("RUNNING", "SUCCESSFUL"):  # django.tasks' lines, from task_started and task_finished
        line = f"Task id={result.id} path=shop.tasks.add state={state}"
        assert out.count(line) == 1, out
    assert out.count("app django TASKS['default']: tasks ") == 1, out  # tether's own


def test_worker_keeps_a_projects_root_logging(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_DJANGO_ROOT_LOG", "1")
    result = tasks.add.using(backend=backend, queue_name="callcmd").enqueue(a=1, b=2)
    done = manage("tether_worker", "--backend", backend, "--burst", "-q", "callcmd", "--no-prefetch", check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert out.count(f"OWN django.tasks: Task id={result.id} path=shop.tasks.add state=SUCCESSFUL\n") == 1, out
    assert out.count(f"OWN tether: app django TASKS['{backend}']: tasks ") == 1, out
