"""workflow.finished and batch.finished (docs/how-to/workflows.md).

Run as a script: a chain and a batch on a SQLite file (or
TETHER_DATABASE_URL), one worker draining them. tests/test_flow_events.py
runs it on both backends."""

import os

from tether import JobContext, Tether
from tether.events import Event

app = Tether(os.environ.get("TETHER_DATABASE_URL", "sqlite:///events-example.db"))


@app.task(name="step")
def step(ctx: JobContext, n: int = 0) -> int:
    return n


# --8<-- [start:members]
@app.task(name="summarize")
def summarize(ctx: JobContext) -> dict[str, int]:
    # a callback: its batch's member ids, a page at a time (ascending)
    first = ctx.batch.member_ids(limit=2)  # the first page of at most 2
    rest = ctx.batch.member_ids(after=first[-1], limit=1000)  # the next one
    every = list(ctx.batch.iter_member_ids(page=1000))  # or all of them, paged
    assert every == first + rest
    return {"members": len(every), "first": every[0]}
# --8<-- [end:members]


# --8<-- [start:events]
@app.on("workflow.finished")
def run_done(event: Event) -> None:
    # once per run, from the process whose ending ended its last step
    print("run", event.workflow_id, "finished")


@app.on("batch.finished")
def batch_done(event: Event) -> None:
    # once per batch, from the process whose ending ended its last member
    print("batch", event.batch_id, "finished")
# --8<-- [end:events]


def main() -> None:
    app.migrate()
    run = app.chain(step.spec(n=1), step.spec(n=2), step.spec(n=3))
    with app.batch(on_complete=summarize.spec()) as batch:
        batch.add_many(step, [{"n": i} for i in range(5)])
    app.drain()
    info = app.get_workflow(run.id)
    assert info is not None and info.finished
    callback = app.get_job(batch.callbacks["on_complete"])
    assert callback is not None and callback.result == {"members": 5, "first": batch.jobs[0]}
    print("ids", run.id, batch.id)
    app.close()


if __name__ == "__main__":
    main()
