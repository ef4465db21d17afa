"""Batches: many jobs, callbacks when they have all ended (docs/how-to/workflows.md).

Run as a script: a batch on a SQLite file (or TETHER_DATABASE_URL), one worker
draining it. tests/test_batches.py runs it on both backends."""

import os

from tether import JobContext, Tether

app = Tether(os.environ.get("TETHER_DATABASE_URL", "sqlite:///batch-example.db"))


# --8<-- [start:tasks]
@app.task(name="resize", max_attempts=1)
def resize(ctx: JobContext, path: str) -> str:
    if path.endswith("/"):  # a folder: its files become members of the same batch
        for name in ("a.png", "b.png"):
            ctx.batch.add(resize.spec(path=path + name))
        return "folder"
    return f"resized {path} (batch {ctx.batch_id})"


@app.task(name="summarize")
def summarize(ctx: JobContext, report_id: int) -> str:
    return f"report {report_id} done"


@app.task(name="notify")
def notify(ctx: JobContext) -> str:
    return "every image resized"
# --8<-- [end:tasks]


def main() -> None:
    app.migrate()
    # --8<-- [start:batch]
    with app.batch(on_complete=summarize.spec(report_id=7), on_success=notify.spec()) as batch:
        batch.add(resize.spec(path="photos/"))
        batch.add_many(resize, [{"path": f"img{i}.png"} for i in range(3)])
    # leaving the block inserted the batch, its members and its callbacks at once
    print(batch.id, batch.callbacks)
    # --8<-- [end:batch]

    app.drain()

    # --8<-- [start:inspect]
    info = app.get_batch(batch.id)
    assert info is not None
    print(info.finished, {str(s): n for s, n in info.counts.items()})  # True {'succeeded': 6}
    # --8<-- [end:inspect]
    for role, job_id in batch.callbacks.items():
        job = app.get_job(job_id)
        assert job is not None
        print(role, job.state, job.result)
    app.close()


if __name__ == "__main__":
    main()
