"""The how-to "Results and retries": waiting for a result, and each way a
handler ends an attempt. Run by tests/test_docs_guides.py as a script."""

import tether
from tether import JobCancelled, JobContext, JobFailed, Outcome, Tether

app = Tether()
calls: dict[int, int] = {}


def ready(order_id: int) -> bool:
    calls[order_id] = calls.get(order_id, 0) + 1
    return order_id != 2  # order 2 is never ready: snoozed, below


def cancelled_upstream(order_id: int) -> bool:
    return order_id == 3


# --8<-- [start:policies]
@app.task(retry_on=(TimeoutError, ConnectionError), max_attempts=5)
def charge(ctx: JobContext, order_id: int) -> None:
    if not ready(order_id):
        raise tether.Retry(delay=30)  # a snooze: again in 30 s, no failure counted
    if cancelled_upstream(order_id):
        raise tether.Discard("order withdrawn")  # dead now, the reason recorded
    if order_id == 4:
        raise ValueError("bad order")  # outside retry_on: dead at once
    # TimeoutError/ConnectionError: retried with backoff; any other exception: dead at once


@app.task(retry_backoff=lambda attempt: 10 * attempt)  # seconds before the next try
def sync(ctx: JobContext) -> None:
    raise ConnectionError("upstream down")
# --8<-- [end:policies]


if __name__ == "__main__":
    app.migrate()
    ids = {n: charge.enqueue(order_id=n) for n in (1, 2, 3, 4)}
    synced = sync.enqueue()
    outcomes = {r.job_id: r.outcome for r in app.drain()}
    assert outcomes == {ids[1]: Outcome.SUCCEEDED, ids[2]: Outcome.SNOOZED, ids[3]: Outcome.DISCARDED,
                        ids[4]: Outcome.FAILED, synced: Outcome.FAILED}, outcomes
    # --8<-- [start:wait]
    job_id = charge.enqueue(order_id=1)  # enqueue, then wait: no special API
    app.drain()  # a worker elsewhere runs it (here: this process)
    try:
        job = app.wait(job_id, timeout=30)  # the finished Job; job.result is the handler's return
    except JobFailed as exc:  # dead: exc.error is its last error, exc.job the Job
        print(exc.error, exc.job)
    except JobCancelled:
        ...
    except TimeoutError:  # still queued or running after 30 s; it goes on
        ...
    # --8<-- [end:wait]
    assert job.state.value == "succeeded"
    try:
        app.wait(ids[4], timeout=5)
    except JobFailed as exc:
        assert "bad order" in str(exc.error) and exc.job.state.value == "dead"
    else:
        raise AssertionError("order 4 should be dead")
    for n in (3, 4):
        job = app.get_job(ids[n])
        assert job is not None and job.state.value == "dead", job
    job = app.get_job(synced)
    assert job is not None and job.state.value == "queued" and job.attempt == 1  # back in 10 s
    job = app.get_job(ids[2])
    assert job is not None and job.state.value == "queued"
    app.close()
    print("ok")
