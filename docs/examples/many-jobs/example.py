"""Finding and acting on many jobs: the example of docs/how-to/many-jobs.md,
run by tests/test_docs_many.py on SQLite and PostgreSQL (TETHER_DATABASE_URL)."""

import os
from datetime import UTC, datetime, timedelta

from tether import JobContext, Tether

app = Tether(os.environ.get("TETHER_DATABASE_URL", "sqlite:///many-jobs.db"))
app.migrate()


# --8<-- [start:tag]
@app.task(name="billing.sync_invoice", tags=["billing"], max_attempts=1)  # every job of it has this tag
def sync_invoice(ctx: JobContext, invoice: int) -> str:
    customer = (ctx.meta or {}).get("customer")
    if invoice % 3 == 0:
        raise RuntimeError(f"the ledger refused invoice {invoice}")
    return f"invoice {invoice} of customer {customer}, tags {ctx.tags}"


for invoice in range(1, 10):
    sync_invoice.using(meta={"customer": 42, "source": "api"}, tags=["eu"]).enqueue(invoice=invoice)
sync_invoice.using(meta={"customer": 7}).enqueue(invoice=10)
# --8<-- [end:tag]

app.drain()  # a worker's work, done here: invoices 3, 6 and 9 fail (dead: one attempt each)

# --8<-- [start:find]
midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
failed = app.jobs(state="dead", task="billing.sync_invoice", meta={"customer": 42}, finished_after=midnight,
                  limit=2)
print([job.args["invoice"] for job in failed.jobs])  # newest first: [9, 6]
more = app.jobs(state="dead", task="billing.sync_invoice", meta={"customer": 42}, finished_after=midnight,
                limit=2, after=failed.next)
print([job.args["invoice"] for job in more.jobs], more.next)  # [3] None: the last page
print(app.count_jobs(tags=["billing", "eu"]))  # 9: jobs holding both tags
# --8<-- [end:find]
assert [job.args["invoice"] for job in failed.jobs] == [9, 6] and more.next is None

# --8<-- [start:act]
retried = app.retry_many(state="dead", task="billing.sync_invoice")  # back to queued, due now
print(retried)  # 3
ended = []
app.on("job.cancelled")(ended.append)  # fires for each job a bulk cancel ends, as for app.cancel
cancelled = app.cancel_many(tags=["eu"], state="queued")  # queued at once; running ones are asked to stop
print(cancelled, len(ended))  # 3 3
week_ago = datetime.now(UTC) - timedelta(days=7)
deleted = app.delete_many(state="succeeded", created_before=week_ago)  # finished jobs only
print(deleted)  # 0: nothing that old
again = app.rerun(failed.jobs[0].id)  # a new job with the same task, args and options
print(app.get_job(again).rerun_of == failed.jobs[0].id)  # True
# --8<-- [end:act]
assert (retried, cancelled, deleted, len(ended)) == (3, 3, 0, 3)

# --8<-- [start:schedule]
# a schedule's jobs carry their task's tags, whoever fires them
app.add_schedule("billing.nightly_resync", "0 2 * * *", task="billing.sync_invoice", args={"invoice": 11})
nightly = app.get_job(app.trigger_schedule("billing.nightly_resync"))  # one job now, as a tick makes
print(nightly.tags, nightly.schedule)  # ['billing'] billing.nightly_resync
# --8<-- [end:schedule]
assert nightly.tags == ["billing"]
app.close()
