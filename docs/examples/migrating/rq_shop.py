# RQ's side of docs/migrating/rq.md, as RQ's documentation writes it:
# compiled by tests/test_docs_migrating.py, not run (RQ is not installed).
# --8<-- [start:tasks]
from datetime import timedelta

from redis import Redis
from rq import Queue, Retry

emails = Queue("emails", connection=Redis())


def send_receipt(order_id: int) -> str:  # in an importable module: workers import it by path
    return f"receipt for order {order_id}"
# --8<-- [end:tasks]


# --8<-- [start:enqueue]
job = emails.enqueue(send_receipt, 42, retry=Retry(max=4, interval=[10, 30, 60]))
emails.enqueue_in(timedelta(seconds=30), send_receipt, 43)
emails.enqueue(send_receipt, 44, job_id="order:44")  # a custom id, not a queued-or-running check
# --8<-- [end:enqueue]
# --8<-- [start:result]
print(job.return_value())  # None until a worker has run it: poll job.get_status()
# --8<-- [end:result]
