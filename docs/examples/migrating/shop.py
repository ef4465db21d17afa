"""The tether side of the "Migrating from" pages: one example, the same on
every page, run as a script by tests/test_docs_migrating.py (the other
queues' side of each page, celery_shop.py and the rest, is compiled there,
not run: the suite does not install them)."""

# --8<-- [start:tasks]
from tether import JobContext, Tether

app = Tether()  # TETHER_DATABASE_URL, else sqlite:///tether.db: no broker, no result backend


@app.task(queue="emails", retry_on=(ConnectionError,), max_attempts=5)
def send_receipt(ctx: JobContext, order_id: int) -> str:
    # ctx.job_id and ctx.attempt: dedupe external effects on them
    return f"receipt for order {order_id}"


@app.periodic("0 3 * * *", timezone="Europe/Paris")  # the database fires each tick once
def nightly_report(ctx: JobContext) -> None: ...
# --8<-- [end:tasks]


if __name__ == "__main__":
    app.migrate()
    # --8<-- [start:enqueue]
    job_id = send_receipt.enqueue(order_id=42)
    send_receipt.using(delay=30, priority=5).enqueue(order_id=43)  # in 30 s, ahead of priority 0
    send_receipt.using(dedup_key="order:44").enqueue(order_id=44)  # one queued or running job per key
    # --8<-- [end:enqueue]
    app.drain(queues=["emails"])  # a worker: `tether worker --app shop:app -q emails -c 10`
    # --8<-- [start:result]
    print(app.wait(job_id, timeout=30).result)  # "receipt for order 42"
    # --8<-- [end:result]
    assert app.wait(job_id, timeout=30).result == "receipt for order 42"
    assert [s.name for s in app.schedules()] == ["shop.nightly_report"], app.schedules()
    app.close()
    print("ok")
