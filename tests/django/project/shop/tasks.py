"""The project's tasks: what the tests enqueue and the workers run."""

import asyncio
import os
import time
from datetime import UTC, datetime
from pathlib import Path

from django.core.mail import send_mail
from django.dispatch import receiver
from django.tasks import task
from django.tasks.signals import task_finished

from tether import Discard, Retry

from .models import Order


@task(queue_name="emails")
def send_receipt(order_id: int, email: str, database: str = "default") -> str:
    order = Order.objects.using(database).filter(id=order_id).first()
    return f"receipt for order {order_id} sent to {email}" + ("" if order else " (order not visible)")


@task
def add(a: int, b: int) -> int:
    return a + b


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task(takes_context=True)
def whoami(context, label: str) -> dict:
    return {"label": label, "attempt": context.attempt, "result_id": context.task_result.id,
            "job_id": context.job.job_id, "worker_ids": context.task_result.worker_ids}


@task(takes_context=True, queue_name="retry", max_attempts=3, retry_backoff=0)
def flaky(context, fail_times: int) -> int:
    if context.attempt <= fail_times:
        raise ValueError(f"attempt {context.attempt} fails")
    return context.attempt


@receiver(task_finished)
def _log_finished(sender, task_result, **kwargs) -> None:
    """Each task_finished a worker sends, as "<id> <status>" lines in the file
    SHOP_SIGNALS names (when set)."""
    path = os.environ.get("SHOP_SIGNALS")
    if path:
        with open(path, "a") as f:
            f.write(f"{task_result.id} {task_result.status}\n")


@task(takes_context=True, queue_name="retry", max_attempts=3, retry_backoff=0, retry_on=ValueError)
def picky(context, how: str) -> int:
    """Raises as told on its first attempt: what task_finished says then."""
    if context.attempt == 1:
        if how == "type":
            raise TypeError("outside retry_on")
        if how == "value":
            raise ValueError("worth another attempt")
        if how == "discard":
            raise Discard("no point")
        if how in ("snooze", "snooze-then-fail"):
            raise Retry(0)  # a snooze: released, this attempt does not count against max_attempts
    if how == "snooze-then-fail":
        raise ValueError(f"attempt {context.attempt} fails")
    return context.attempt


@task(takes_context=True, queue_name="retry", retry_backoff=0)
def bad_result(context, how: str):
    """Returns a datetime, which is not JSON: the task fails, unless its
    context.transaction() committed its success first (then it stays
    succeeded, as it does when it raises after that commit)."""
    if how.startswith("commit"):
        with context.transaction():
            pass
        if how == "commit-raise":
            raise ValueError("after the commit")
    return datetime.now(UTC)



@task(takes_context=True, queue_name="coop", retry_backoff=0)
def cooperative(context, marker: str, then: str) -> str:
    """Runs until its cancel signal (a cancel request, its timeout), as a
    def task that checks context.job.cancelled does; then returns, or raises
    JobCancelled (then="raise")."""
    Path(marker).write_text(str(context.attempt))
    deadline = time.monotonic() + 30
    while not context.job.cancelled and time.monotonic() < deadline:
        time.sleep(0.05)
    if then == "raise":
        context.job.raise_if_cancelled()
    return "stopped"

@task(queue_name="retry", retry_backoff=0)
def configured(n: int) -> int:
    """max_attempts from OPTIONS["task_options"] on the pg backend (1), tether's default (3) elsewhere."""
    raise RuntimeError(f"configured {n}")


@task(queue_name="prio")
def record(path: str, label: str) -> str:
    with open(path, "a") as f:
        f.write(label + "\n")
    return label


@task(queue_name="kill")
def slow(marker: str, seconds: float) -> str:
    Path(marker).write_text(str(os.getpid()))
    time.sleep(seconds)
    return f"slept in {os.getpid()}"


# -- the examples of Django's Tasks documentation (topics/tasks) ---------------------------
@task(queue_name="docs")
def email_users(emails, subject, message):
    return send_mail(subject=subject, message=message, from_email=None, recipient_list=emails)


@task(priority=2, queue_name="docs")
def email_users_prioritised(emails, subject, message):
    return send_mail(subject=subject, message=message, from_email=None, recipient_list=emails)


@task(takes_context=True, queue_name="docs")
def email_users_with_context(context, emails, subject, message):
    print(f"Attempt {context.attempt} to send user email. Task result id: {context.task_result.id}.")
    return send_mail(subject=subject, message=message, from_email=None, recipient_list=emails)


@task(queue_name="docs")
def process_data(data):
    return data


@task(queue_name="docs")
def double_dictionary(key):
    return {key: key * 2}


@task(takes_context=True, queue_name="tx")
def place_order(context, email: str, steal: bool = False) -> int:
    """The order row and the task's success in one commit (context.transaction());
    ``steal``: the first attempt loses its job inside the block, as when its
    lease lapses and the job moves on, so its order must never land."""
    from django.tasks import task_backends

    with context.transaction():
        if steal and context.attempt == 1:  # (before the block's first write: SQLite's write lock)
            job = context.job
            task_backends[context.task_result.backend].app.store.release(job.worker_id, job.job_id, job.attempt)
        order = Order.objects.using(context.database).create(email=email)
    return order.id
