"""task_finished after an attempt its cancel signal ended says what the
worker records: a timed-out attempt is retried while attempts are left (the
task returning after its timeout does not make it SUCCESSFUL), a cancel
request ends the task FAILED (cancelled), on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.tasks import TaskResultStatus, task_backends
from shop import tasks

from conftest import start_worker, stop, wait_for


def _said(log: Path) -> dict[str, list[str]]:
    said: dict[str, list[str]] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        job_id, status = line.split()
        said.setdefault(job_id, []).append(status)
    return said


def test_task_finished_after_a_timeout(backend: str, burst, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "signals.log"
    monkeypatch.setenv("SHOP_SIGNALS", str(log))
    result = tasks.cooperative.using(backend=backend, timeout=0.5, max_attempts=2).enqueue(
        marker=str(tmp_path / "started"), then="return")
    burst(backend, "coop")
    wait_for(lambda: len(_said(log).get(result.id, [])) >= 2, timeout=10)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.attempts == 2
    assert [e.exception_class_path for e in result.errors] == ["tether.contrib.django.errors.AttemptTimedOut"] * 2
    assert _said(log)[result.id] == ["READY", "FAILED"]


def test_task_finished_after_a_cancel_request(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "signals.log"
    monkeypatch.setenv("SHOP_SIGNALS", str(log))
    marker = tmp_path / "started"
    result = tasks.cooperative.using(backend=backend).enqueue(marker=str(marker), then="raise")
    worker = start_worker("--backend", backend, "-q", "coop", "--no-prefetch")
    try:
        wait_for(marker.exists)
        task_backends[backend].cancel(result.id)
        wait_for(lambda: task_backends[backend].get_result(result.id).is_finished)
        wait_for(lambda: result.id in _said(log), timeout=10)
    finally:
        stop(worker)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.attempts == 1
    assert _said(log)[result.id] == ["FAILED"]
