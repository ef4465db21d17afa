"""tether.contrib.django in a real Django project (tests/django/project), on
SQLite and PostgreSQL: enqueue from a view in atomic() (committed and rolled
back), real ``manage.py tether_worker`` processes (one SIGKILLed mid-task),
results, retries in ``errors``, takes_context, priority order, defer, async
tasks, and Django's own Tasks documentation examples."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connections, transaction
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.test import Client
from django.utils import timezone
from shop import tasks
from shop.models import Order

from conftest import manage, start_worker, stop, wait_for
from tether import ArgumentsError, ConfigError
from tether.contrib.django import TetherBackend


def db(alias: str) -> str:
    return "pg" if alias == "pg" else "default"


def test_backend_declares_what_it_supports(backend: str) -> None:
    b = task_backends[backend]
    assert isinstance(b, TetherBackend)
    assert (b.supports_defer, b.supports_priority, b.supports_async_task, b.supports_get_result) == (True,) * 4
    assert b.app.dsn.backend == ("postgresql" if backend == "pg" else "sqlite")


def test_view_enqueues_in_its_transaction_and_a_rollback_leaves_no_job(backend: str, burst) -> None:
    client = Client()
    ok = client.post("/order/", {"backend": backend, "email": "a@example.com"}).json()
    assert ok["committed"]
    refused = client.post("/order/", {"backend": backend, "email": "b@example.com", "fail": "1"})
    assert refused.status_code == 409
    with pytest.raises(TaskResultDoesNotExist):
        tasks.send_receipt.using(backend=backend).get_result(refused.json()["result_id"])
    assert not Order.objects.using(db(backend)).filter(email="b@example.com").exists()
    burst(backend, "emails")
    result = tasks.send_receipt.using(backend=backend).get_result(ok["result_id"])
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == f"receipt for order {ok['order_id']} sent to a@example.com"
    assert result.attempts == 1 and len(result.worker_ids) == 1 and result.errors == []
    assert result.enqueued_at <= result.started_at <= result.last_attempted_at <= result.finished_at


def test_enqueue_joins_atomic_and_autocommit(backend: str) -> None:
    with pytest.raises(ZeroDivisionError), transaction.atomic(using=db(backend)):
        gone = tasks.add.using(backend=backend).enqueue(1, 2)
        1 / 0  # noqa: B018
    with pytest.raises(TaskResultDoesNotExist):
        task_backends[backend].get_result(gone.id)
    assert connections[db(backend)].get_autocommit()
    kept = tasks.add.using(backend=backend).enqueue(a=2, b=3)  # outside atomic: committed at once
    assert task_backends[backend].get_result(kept.id).status == TaskResultStatus.READY
    with transaction.atomic(using=db(backend)):
        transaction.on_commit(lambda: tasks.add.using(backend=backend).enqueue(a=5, b=5), using=db(backend))
    assert connections[db(backend)].get_autocommit()


def test_a_rolled_back_result_id_never_names_another_job(backend: str) -> None:
    """A result id captured inside a rolled-back atomic() names no result,
    ever: on SQLite the next job is given the same job id (AUTOINCREMENT
    rolls back with the transaction), and its result is not the rolled-back
    one's; get_result and cancel refuse the old id, and a job id alone."""
    with pytest.raises(ZeroDivisionError), transaction.atomic(using=db(backend)):
        gone = tasks.add.using(backend=backend, queue_name="later").enqueue(1, 2)
        1 / 0  # noqa: B018
    kept = tasks.send_receipt.using(backend=backend).enqueue(order_id=1, email="x@example.com")
    b = task_backends[backend]
    job_id = int(kept.id.split("-")[0])
    if backend == "default":  # SQLite: the same job id again (PostgreSQL's sequences never roll back)
        assert int(gone.id.split("-")[0]) == job_id
    for stale in (gone.id, str(job_id)):
        with pytest.raises(TaskResultDoesNotExist):
            b.get_result(stale)
        with pytest.raises(TaskResultDoesNotExist):
            tasks.add.using(backend=backend).get_result(stale)
        with pytest.raises(TaskResultDoesNotExist):
            b.cancel(stale)
    assert b.get_result(kept.id).status == TaskResultStatus.READY  # the stale cancels left it alone
    for wrong in ("", "-", "1-", "+1", "\u0661", "1_0", "1-x y", "99999999999999999999", "1-2-3"):
        with pytest.raises(TaskResultDoesNotExist):
            b.get_result(wrong)


def test_a_dedup_window_and_the_duplicate_flag(backend: str) -> None:
    """Issue 44 through the backend: ``using(dedup_key=..., dedup_for=...)``;
    the second enqueue's result is the first's, with ``duplicate`` True."""
    call = tasks.add.using(backend=backend, dedup_key="django-dedup", dedup_for="1h", expires="10m")
    first = call.enqueue(a=1, b=1)
    again = call.enqueue(a=1, b=1)
    assert first.duplicate is False and again.duplicate is True and again.id == first.id
    job = task_backends[backend].app.get_job(task_backends[backend].job_id(first.id))
    assert job.dedup_for == 3600.0 and job.expires_at is not None


def test_get_result_inside_atomic_sees_the_task_it_enqueued(backend: str) -> None:
    """Inside atomic(), results are read through Django's connection, as
    Django's own database backend reads them: the transaction's task is
    found (and refreshed) before the commit; after a rollback it is gone."""
    with pytest.raises(ZeroDivisionError), transaction.atomic(using=db(backend)):
        result = tasks.add.using(backend=backend).enqueue(1, 2)
        found = task_backends[backend].get_result(result.id)
        assert found.status == TaskResultStatus.READY and found.args == [1, 2]
        assert found == result  # enqueue() returned the row, as get_result() reads it
        assert found.task.backend == backend  # not the backend the task was defined with: refresh() reads it
        result.refresh()
        assert result.status == TaskResultStatus.READY
        1 / 0  # noqa: B018
    with pytest.raises(TaskResultDoesNotExist):
        task_backends[backend].get_result(result.id)
    with transaction.atomic(using=db(backend)):
        kept = tasks.add.using(backend=backend).enqueue(3, 4)
        assert task_backends[backend].get_result(kept.id).status == TaskResultStatus.READY
    assert task_backends[backend].get_result(kept.id).args == [3, 4]


def test_context_transaction_commits_the_orm_writes_with_the_tasks_success(backend: str, burst) -> None:
    """``context.transaction()``: the order row lands with the task's success,
    once; an attempt that lost its job inside the block commits nothing, and
    the next attempt places the order."""
    ok = tasks.place_order.using(backend=backend).enqueue(email="tx-ok@example.com")
    stolen = tasks.place_order.using(backend=backend).enqueue(email="tx-stolen@example.com", steal=True)
    burst(backend, "tx")
    orders = Order.objects.using(db(backend))
    done = task_backends[backend].get_result(ok.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.attempts == 1
    assert list(orders.filter(email="tx-ok@example.com").values_list("id", flat=True)) == [done.return_value]
    again = task_backends[backend].get_result(stolen.id)
    assert again.status == TaskResultStatus.SUCCESSFUL and again.attempts == 2
    assert list(orders.filter(email="tx-stolen@example.com").values_list("id", flat=True)) == [again.return_value]
    with pytest.raises(ConfigError, match="outermost"), transaction.atomic(using=db(backend)):
        from tether.contrib.django import TetherTaskContext  # a context outside a worker, in atomic()

        with TetherTaskContext(task_result=done, job=None, database=db(backend)).transaction():  # type: ignore[arg-type]
            pass


def test_killed_worker_task_is_finished_by_another(backend: str, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    result = tasks.slow.using(backend=backend).enqueue(marker=str(marker), seconds=1.5)
    first = start_worker("--backend", backend, "-q", "kill", "--no-prefetch")
    try:
        wait_for(marker.exists)
        victim = int(marker.read_text())
        stop(first, signal.SIGKILL)
        marker.unlink()
        second = start_worker("--backend", backend, "-q", "kill", "--no-prefetch")
        try:
            wait_for(lambda: task_backends[backend].get_result(result.id).is_finished, timeout=60)
        finally:
            stop(second)
    finally:
        if first.returncode is None:
            stop(first, signal.SIGKILL)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value != f"slept in {victim}"
    assert result.attempts == 2 and len(set(result.worker_ids)) == 2
    [lost] = result.errors
    assert lost.exception_class_path == "tether.contrib.django.errors.LeaseExpired"
    assert lost.exception_class.__name__ == "LeaseExpired"


def test_retries_are_recorded_in_errors(backend: str, burst) -> None:
    ok = tasks.flaky.using(backend=backend).enqueue(fail_times=2)
    dead = tasks.flaky.using(backend=backend).enqueue(fail_times=5)
    burst(backend, "retry")
    ok = tasks.flaky.using(backend=backend).get_result(ok.id)
    assert ok.status == TaskResultStatus.SUCCESSFUL and ok.return_value == 3 and ok.attempts == 3
    assert [e.exception_class for e in ok.errors] == [ValueError, ValueError]
    assert "attempt 2 fails" in ok.errors[1].traceback
    dead = tasks.flaky.using(backend=backend).get_result(dead.id)
    assert dead.status == TaskResultStatus.FAILED and dead.attempts == 3 and len(dead.errors) == 3
    with pytest.raises(ValueError, match="Task failed"):
        dead.return_value  # noqa: B018


def test_task_finished_tells_what_becomes_of_the_job(backend: str, burst, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The status task_finished carries after an attempt raised is the one the
    worker gives the job: READY when it runs again, FAILED when it ends, on
    the first of three attempts too (it said READY whenever attempts were left)."""
    log = tmp_path / "signals.log"
    monkeypatch.setenv("SHOP_SIGNALS", str(log))
    ids = {how: tasks.picky.using(backend=backend).enqueue(how=how).id
           for how in ("type", "value", "discard", "snooze", "snooze-then-fail")}
    burst(backend, "retry")
    said: dict[str, list[str]] = {}
    for line in log.read_text().splitlines():
        job_id, status = line.split()
        said.setdefault(job_id, []).append(status)
    assert said[ids["type"]] == ["FAILED"]  # outside retry_on: ends at once
    assert said[ids["value"]] == ["READY", "SUCCESSFUL"]  # retried, then succeeded
    assert said[ids["discard"]] == ["FAILED"]
    assert said[ids["snooze"]] == ["READY", "SUCCESSFUL"]
    # a released attempt does not count against max_attempts (3): the 3rd attempt is the 2nd that counts
    assert said[ids["snooze-then-fail"]] == ["READY", "READY", "READY", "FAILED"]
    final = {how: task_backends[backend].get_result(i) for how, i in ids.items()}
    assert {how: r.status for how, r in final.items()} == {
        "type": TaskResultStatus.FAILED, "value": TaskResultStatus.SUCCESSFUL, "discard": TaskResultStatus.FAILED,
        "snooze": TaskResultStatus.SUCCESSFUL, "snooze-then-fail": TaskResultStatus.FAILED}
    assert final["snooze-then-fail"].attempts == 4


def test_task_finished_for_a_result_that_is_not_json(backend: str, burst, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A task whose return value is not JSON (a datetime) ends FAILED at
    once, with Django's TypeError, and task_finished says so (it said SUCCESSFUL, sent before tether stored the
    result); unless its context.transaction() had committed its success: then
    it stays SUCCESSFUL, as when it raises after that commit."""
    log = tmp_path / "signals.log"
    monkeypatch.setenv("SHOP_SIGNALS", str(log))
    ids = {how: tasks.bad_result.using(backend=backend).enqueue(how=how).id
           for how in ("result", "commit-result", "commit-raise")}
    burst(backend, "retry")
    said: dict[str, list[str]] = {}
    for line in log.read_text().splitlines():
        job_id, status = line.split()
        said.setdefault(job_id, []).append(status)
    final = {how: task_backends[backend].get_result(i) for how, i in ids.items()}
    assert said[ids["result"]] == ["FAILED"]
    assert final["result"].status == TaskResultStatus.FAILED and final["result"].attempts == 1
    error = final["result"].errors[-1]  # as Django's backends record it: its TypeError, and no retry
    assert error.exception_class is TypeError, error
    assert error.traceback.endswith("TypeError: Unsupported type: <class 'datetime.datetime'>\n"), error
    for how in ("commit-result", "commit-raise"):
        assert said[ids[how]] == ["SUCCESSFUL"], how
        assert final[how].status == TaskResultStatus.SUCCESSFUL and final[how].return_value is None

def test_task_options_mapping(backend: str, burst) -> None:
    result = tasks.configured.using(backend=backend).enqueue(n=1)
    burst(backend, "retry")
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == (1 if backend == "pg" else 3)  # OPTIONS["task_options"] on pg
    assert result.errors[0].exception_class_path == "builtins.RuntimeError"


def test_takes_context(backend: str, burst) -> None:
    result = tasks.whoami.using(backend=backend).enqueue(label="me")
    burst(backend, "default")
    result.refresh()
    value = result.return_value
    assert value["attempt"] == 1 and value["result_id"] == result.id
    assert value["job_id"] == task_backends[backend].job_id(result.id) and result.id.startswith(f"{value['job_id']}-")
    assert value["worker_ids"] == result.worker_ids


def test_priority_order(backend: str, burst, tmp_path: Path) -> None:
    log = tmp_path / "order.log"
    for p in (0, -100, 100, 5, -5, 99):
        tasks.record.using(backend=backend, priority=p).enqueue(path=str(log), label=str(p))
    burst(backend, "prio", extra=("-c", "1"))
    assert log.read_text().split() == ["100", "99", "5", "0", "-5", "-100"]


def test_defer(backend: str, burst) -> None:
    when = timezone.now() + timedelta(seconds=8)  # past a burst worker's start-up
    result = tasks.add.using(backend=backend, queue_name="later", run_after=when).enqueue(a=1, b=1)
    assert task_backends[backend].get_result(result.id).status == TaskResultStatus.READY
    burst(backend, "later")
    result.refresh()
    if timezone.now() < when:  # the burst worker ended before it was due (a slow start-up may not)
        assert result.status == TaskResultStatus.READY
    assert result.task.run_after == when
    time.sleep(max(0.0, (when - timezone.now()).total_seconds()) + 0.2)
    burst(backend, "later")
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 2
    assert result.started_at >= when


def test_async_task_and_aenqueue(backend: str, burst) -> None:
    async def go() -> str:
        r = await tasks.async_add.using(backend=backend).aenqueue(a=20, b=22)
        return str(r.id)

    result_id = asyncio.run(go())
    burst(backend, "default")
    result = asyncio.run(tasks.async_add.using(backend=backend).aget_result(result_id))
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42


def test_queue_names_are_validated_and_args_checked(backend: str) -> None:
    with pytest.raises(InvalidTask, match="Queue 'nope' is not valid"):
        tasks.add.using(backend=backend, queue_name="nope")
    with pytest.raises(ValueError, match="arguments do not fit"):  # a PayloadError, as it was
        tasks.add.using(backend=backend).enqueue(a=1)
    with pytest.raises(TypeError, match="arguments do not fit") as info:  # as calling add(a=1) raises
        tasks.add.using(backend=backend).enqueue(1, 2, 3)
    assert isinstance(info.value, ArgumentsError)


def test_cancel_a_ready_task(backend: str) -> None:
    result = tasks.add.using(backend=backend, queue_name="later").enqueue(a=1, b=1)
    assert task_backends[backend].cancel(result.id) == TaskResultStatus.FAILED
    result.refresh()
    assert result.status == TaskResultStatus.FAILED


def test_unknown_job_is_no_result(backend: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        task_backends[backend].get_result("999999")
    with pytest.raises(TaskResultDoesNotExist):
        task_backends[backend].get_result("not-a-number")


def test_worker_help_shares_tether_worker_options() -> None:
    out = manage("tether_worker", "--help").stdout
    for flag in ("--concurrency", "--queues", "--lease-ttl", "--burst", "--backend", "--shutdown-timeout"):
        assert flag in out


def test_call_command_runs_a_burst_worker_in_process(backend: str) -> None:
    """``call_command("tether_worker", ...)``, with keyword options or command
    line ones, as a test would drain its tasks: the same options as
    ``manage.py tether_worker``, checked by the same command."""
    first = tasks.add.using(backend=backend, queue_name="callcmd").enqueue(a=1, b=2)
    call_command("tether_worker", backend=backend, burst=True, queues=["callcmd"], prefetch=False,
                 log_level="warning")
    first.refresh()
    assert first.status == TaskResultStatus.SUCCESSFUL and first.return_value == 3
    second = tasks.add.using(backend=backend, queue_name="callcmd").enqueue(a=2, b=2)
    call_command("tether_worker", "--backend", backend, "--burst", "-q", "callcmd", "-c", "2")
    second.refresh()
    assert second.status == TaskResultStatus.SUCCESSFUL and second.return_value == 4
    with pytest.raises(CommandError, match="concurrency"):
        call_command("tether_worker", backend=backend, burst=True, concurrency=0)
    with pytest.raises(TypeError, match="concurency"):  # a misspelt name: Django's call_command, as the README says
        call_command("tether_worker", backend=backend, burst=True, concurency=2)
    with pytest.raises(CommandError, match="notether"):
        call_command("tether_worker", backend="notether", burst=True)


def test_worker_refuses_a_backend_that_is_not_tether() -> None:
    done = manage("tether_worker", "--backend", "nope", check=False)
    assert done.returncode != 0


# -- Django's Tasks documentation (docs/topics/tasks.txt), on this backend ---------------------
def test_docs_defining_and_enqueueing(backend: str, burst) -> None:
    email_users = tasks.email_users.using(backend=backend)
    result = email_users.enqueue(emails=["user@example.com"], subject="You have a message", message="Hello there!")
    assert result.status == TaskResultStatus.READY
    burst(backend, "docs")
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 1  # send_mail's count


def test_docs_modifying_tasks(backend: str, burst) -> None:
    assert tasks.email_users_prioritised.priority == 2
    modified = tasks.email_users_prioritised.using(priority=10, backend=backend)
    assert modified.priority == 10 and tasks.email_users_prioritised.priority == 2
    result = modified.enqueue(emails=["u@example.com"], subject="s", message="m")
    assert result.task.priority == 10
    burst(backend, "docs")
    assert modified.get_result(result.id).task.priority == 10


def test_docs_task_context(backend: str, burst) -> None:
    result = tasks.email_users_with_context.using(backend=backend).enqueue(
        emails=["u@example.com"], subject="s", message="m")
    out = burst(backend, "docs")
    assert f"Attempt 1 to send user email. Task result id: {result.id}." in out


def test_docs_transactions_on_commit(backend: str) -> None:
    from functools import partial

    from tether.contrib.django.results import result_id

    store = task_backends[backend].app.store

    def jobs() -> set[int]:  # earlier tests of the session leave jobs of this task behind
        return {j.id for j in store.list_jobs(task=tasks.add.module_path, limit=100_000)}

    before = jobs()
    with transaction.atomic(using=db(backend)):
        Order.objects.using(db(backend)).create(email="docs@example.com")
        transaction.on_commit(partial(tasks.add.using(backend=backend).enqueue, a=1, b=2), using=db(backend))
        assert jobs() == before  # not before the commit
    (new,) = jobs() - before
    job = store.get_job(new)
    assert job is not None and task_backends[backend].get_result(result_id(job)).kwargs == {"a": 1, "b": 2}


def test_docs_arguments_must_be_json(backend: str, burst) -> None:
    from datetime import datetime

    with pytest.raises(TypeError, match="Unsupported type"):  # Django's own words (django.utils.json)
        tasks.process_data.using(backend=backend).enqueue(datetime.now())
    # a tuple becomes a list on the way through JSON: the docs' example fails in the worker, as documented
    # (max_attempts=1: tether would retry it, where Django's ImmediateBackend fails once)
    result = tasks.double_dictionary.using(backend=backend, max_attempts=1).enqueue((1, 2, 3))
    with pytest.raises(ValueError, match="not finished"):
        result.return_value  # noqa: B018 - "Return values": unfinished raises ValueError
    burst(backend, "docs")
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert "TypeError: unhashable type: 'list'" in result.errors[-1].traceback


def test_docs_results(backend: str, burst) -> None:
    email_users = tasks.email_users.using(backend=backend)
    result = email_users.enqueue(emails=["u@example.com"], subject="s", message="m")
    result_id = result.id
    burst(backend, "docs")
    # "Retrieving results": from the task, or from the backend
    assert email_users.get_result(result_id).status == TaskResultStatus.SUCCESSFUL
    assert task_backends[backend].get_result(result_id).return_value == 1
    if backend == "default":
        assert default_task_backend.get_result(result_id).is_finished
    # "Updating results"
    assert result.status == TaskResultStatus.READY
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    asyncio.run(result.arefresh())
    assert result.return_value == 1


def test_docs_exceptions(backend: str, burst) -> None:
    result = tasks.flaky.using(backend=backend).enqueue(fail_times=9)
    burst(backend, "retry")
    result.refresh()
    assert result.errors[0].exception_class is ValueError
    assert "ValueError: attempt 1 fails" in result.errors[0].traceback


def test_import_tether_needs_no_django() -> None:
    import subprocess
    import sys

    code = "import sys, tether, tether.contrib.django; assert 'django' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "DJANGO_SETTINGS_MODULE": ""})
