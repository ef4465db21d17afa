"""The how-to "Defining and enqueueing tasks": an app, its tasks, every way
to enqueue, and reading a job back. Run by tests/test_docs_guides.py as a
script, in an empty directory (the SQLite file tether.db lands there)."""

import asyncio

# --8<-- [start:app]
from tether import JobContext, Tether

app = Tether()  # TETHER_DATABASE_URL, else sqlite:///tether.db in the working directory
# app = Tether("postgresql://user@db-host/mydb")


@app.task(max_attempts=5, timeout=600)
def resize(ctx: JobContext, path: str) -> dict[str, object]:
    for i in range(10):
        ctx.raise_if_cancelled()  # a cancel request, a lost lease or shutdown
        ctx.progress(i / 10, f"tile {i}/10")  # recorded on the job; also renews the lease
    return {"path": path, "ok": True}  # stored as the job's result (JSON)


@app.task(queue="net")
async def fetch(ctx: JobContext, url: str) -> None:
    ...  # cancelled with asyncio cancellation when needed
# --8<-- [end:app]


async def from_async_code() -> list[int]:
    # --8<-- [start:async]
    job_id = await fetch.enqueue_async(url="https://example.com")
    ids = await fetch.enqueue_many_async([{"url": "https://a.example"}, {"url": "https://b.example"}])
    # --8<-- [end:async]
    await app.aclose()  # this loop's connections (PostgreSQL opens some per loop)
    return [job_id, *ids]


if __name__ == "__main__":
    app.migrate()  # `tether migrate` does the same
    # --8<-- [start:enqueue]
    job_id = resize.enqueue(path="a.png")  # from sync code
    b = resize.using(queue="images", priority=5, delay=30, dedup_key="a.png", max_attempts=3).enqueue(path="b.png")
    ids = resize.enqueue_many([{"path": "c.png"}, {"path": "d.png"}])  # one statement for many

    job = app.get_job(job_id)  # state, attempt, args, result, last_error, progress, attempts history
    # --8<-- [end:enqueue]
    assert job is not None and job.state.value == "queued" and job.args == {"path": "a.png"}
    fetched = asyncio.run(from_async_code())
    # dedup: while a job with that key is queued or running, enqueue returns its id and adds nothing
    assert resize.using(dedup_key="a.png").enqueue(path="other.png") == b
    ran = app.drain()  # a worker in this process, until no job is due (below: the tests guide)
    assert {r.job_id for r in ran} == {job_id, *ids, *fetched}, ran
    assert app.wait(job_id, timeout=5).result == {"path": "a.png", "ok": True}
    # --8<-- [start:control]
    later = resize.using(delay=3600).enqueue(path="e.png")
    app.cancel(later)  # queued: cancelled at once; running: the handler is told
    app.retry(later)  # a dead or cancelled job back to queued
    # --8<-- [end:control]
    job = app.get_job(later)
    assert job is not None and job.state.value == "queued"
    app.close()
    print("ok")
