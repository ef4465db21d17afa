"""Workflows: steps that wait for steps (docs/how-to/workflows.md).

Run as a script: a workflow on a SQLite file (or TETHER_DATABASE_URL), one
worker draining it. tests/test_workflows.py runs it on both backends."""

import os

from tether import JobContext, Tether

app = Tether(os.environ.get("TETHER_DATABASE_URL", "sqlite:///workflows-example.db"))


# --8<-- [start:tasks]
@app.task(name="fetch")
def fetch(ctx: JobContext, url: str) -> dict[str, str]:
    return {"body": f"<html>{url}</html>"}


@app.task(name="parse")
def parse(ctx: JobContext) -> int:
    body = ctx.upstream["fetch"]["body"]  # {step name: result} of the steps it waits for
    return len(body)


@app.task(name="check", max_attempts=1)
def check(ctx: JobContext, strict: bool) -> None:
    if strict:
        raise ValueError("not valid")


@app.task(name="report")
def report(ctx: JobContext, kind: str) -> dict[str, object]:
    # on_failure="run": it runs once every dependency ended, and sees which failed
    return {"kind": kind, "upstream": ctx.upstream, "states": ctx.upstream_states, "run": ctx.workflow_id}
# --8<-- [end:tasks]


def main() -> None:
    app.migrate()
    # --8<-- [start:build]
    wf = app.workflow("import-42")
    a = wf.add(fetch.spec(url="https://example.org"))
    b = wf.add(parse.spec(), after=[a])
    c = wf.add(check.spec(strict=True), after=[a])
    wf.add(parse.spec(), after=[c], name="parse-checked")  # cancelled: check ends dead
    wf.add(report.spec(kind="full"), after=[b, c], name="report", on_failure="run")
    run = wf.enqueue()  # every step in one transaction
    print(run.jobs)  # {'fetch': 1, 'parse': 2, 'check': 3, 'parse-checked': 4, 'report': 5}
    # --8<-- [end:build]

    app.drain()  # a worker would do this: app.run_worker()

    # --8<-- [start:inspect]
    info = app.get_workflow(run.id)
    assert info is not None
    for step in info.steps:
        print(step.name, step.state, "after", list(step.after))
    job = app.get_job(run.jobs["parse-checked"])
    assert job is not None
    print(job.state, job.last_error)  # cancelled upstream job 3 ended dead
    # --8<-- [end:inspect]

    # --8<-- [start:chain]
    chained = app.chain(fetch.spec(url="https://example.com"), parse.spec())
    # --8<-- [end:chain]
    app.drain()
    final = app.get_workflow(chained.id)
    assert final is not None and final.finished
    print("report:", app.get_job(run.jobs["report"]).result)  # type: ignore[union-attr]
    app.close()


if __name__ == "__main__":
    main()
