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
    with app.batch(on_complete=step.spec()) as batch:
        batch.add_many(step, [{"n": i} for i in range(5)])
    app.drain()
    info = app.get_workflow(run.id)
    assert info is not None and info.finished
    print("ids", run.id, batch.id)
    app.close()


if __name__ == "__main__":
    main()
