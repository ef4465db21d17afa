# procrastinate's side of docs/migrating/procrastinate.md, as procrastinate's
# documentation writes it: compiled by tests/test_docs_migrating.py, not run
# (procrastinate is not installed).
# --8<-- [start:tasks]
from procrastinate import App, PsycopgConnector

app = App(connector=PsycopgConnector(conninfo="postgresql://user@db-host/mydb"))


@app.task(queue="emails", retry=4)
def send_receipt(order_id: int) -> str:
    return f"receipt for order {order_id}"


@app.periodic(cron="0 3 * * *")
@app.task
def nightly_report(timestamp: int) -> None: ...
# --8<-- [end:tasks]


with app.open():
    # --8<-- [start:enqueue]
    job_id = send_receipt.defer(order_id=42)
    send_receipt.configure(schedule_in={"seconds": 30}, priority=5).defer(order_id=43)
    send_receipt.configure(queueing_lock="order:44").defer(order_id=44)  # one waiting job per lock
    # --8<-- [end:enqueue]
# --8<-- [start:result]
# procrastinate keeps no return value: a task writes what callers need itself
# --8<-- [end:result]
