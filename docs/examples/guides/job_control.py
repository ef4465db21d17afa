"""The how-to guides "Retention" and "Pausing, limits and exclusive keys".
Run by tests/test_docs_guides.py as a script."""

from datetime import timedelta

from tether import JobContext, Tether

# --8<-- [start:retention]
app = Tether(retention={"succeeded": "7d", "cancelled": "30d", "dead": "30d"})  # the defaults
app = Tether(retention={"succeeded": "12h", "dead": None})  # dead kept forever; others as given or default
app = Tether(retention={"succeeded": timedelta(hours=12)})  # "90s", "30m", "12h", "7d", "2w", seconds, a timedelta
app = Tether(retention=None)  # keep everything
# --8<-- [end:retention]


@app.task(queue="emails")
def send_receipt(ctx: JobContext, order_id: int) -> None: ...


if __name__ == "__main__":
    app.migrate()
    # --8<-- [start:pause]
    app.pause("emails")  # stored in the database: every worker stops claiming from it
    app.resume("emails")
    # --8<-- [end:pause]
    app.pause("emails")
    send_receipt.enqueue(order_id=1)
    assert app.drain() == []  # paused: nothing runs
    app.resume("emails")
    # --8<-- [start:limits]
    app.configure_queue("emails", concurrency=5, rate=(100, 60))  # or rate=(100, "1m")
    send_receipt.using(exclusive_key="customer:42").enqueue(order_id=7)
    # --8<-- [end:limits]
    [limits] = app.queue_limits()
    assert limits.queue == "emails" and limits.concurrency == 5, limits
    assert len(app.drain()) == 2
    app.configure_queue("emails")  # neither limit given: both lifted
    assert app.queue_limits() == []
    app.close()
    print("ok")
