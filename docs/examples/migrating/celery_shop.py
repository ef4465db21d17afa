# Celery's side of docs/migrating/celery.md, as Celery's documentation writes
# it: compiled by tests/test_docs_migrating.py, not run (Celery is not installed).
# --8<-- [start:tasks]
from celery import Celery
from celery.schedules import crontab

app = Celery("shop", broker="redis://localhost:6379/0", backend="redis://localhost:6379/1")
app.conf.timezone = "Europe/Paris"
app.conf.beat_schedule = {"nightly-report": {"task": "shop.nightly_report", "schedule": crontab(hour=3, minute=0)}}


@app.task(autoretry_for=(ConnectionError,), max_retries=4, retry_backoff=True)
def send_receipt(order_id: int) -> str:
    return f"receipt for order {order_id}"


@app.task
def nightly_report() -> None: ...
# --8<-- [end:tasks]


# --8<-- [start:enqueue]
result = send_receipt.delay(42)
send_receipt.apply_async(kwargs={"order_id": 43}, countdown=30, priority=5, queue="emails")
# --8<-- [end:enqueue]
# --8<-- [start:result]
print(result.get(timeout=30))
# --8<-- [end:result]
