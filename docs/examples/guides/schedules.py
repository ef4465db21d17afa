"""The how-to "Schedules in code": periodic tasks, and what app.schedules()
reports. Run by tests/test_docs_guides.py as a script."""

from tether import JobContext, Tether

app = Tether()

# --8<-- [start:periodic]
@app.periodic("*/5 * * * *")  # a task that is also scheduled; named as @app.task names it
def sweep(ctx: JobContext) -> None: ...


@app.periodic("0 3 * * *", name="reports.nightly", timezone="Europe/Paris",
              args={"kind": "full"}, queue="reports", catch_up=1, overlap=False)
async def nightly(ctx: JobContext, kind: str) -> None:
    tick = ctx.scheduled_for  # the tick this job is for (aware, UTC); None for a job not from a schedule
    print(kind, tick)


@app.periodic("0 * * * *")  # over @app.task: schedules that task, with its options
@app.task(queue="reports", retry_on=TimeoutError)
def hourly(ctx: JobContext) -> None: ...


@app.periodic("*/10 * * * * *")  # six fields: seconds first
def every_ten_seconds(ctx: JobContext) -> None: ...
# --8<-- [end:periodic]


if __name__ == "__main__":
    app.migrate()
    # --8<-- [start:info]
    for schedule in app.schedules():  # what `tether schedules` prints
        print(schedule.name, schedule.cron, schedule.timezone, schedule.next_tick, schedule.orphaned)
    # --8<-- [end:info]
    names = {s.name for s in app.schedules()}
    assert "reports.nightly" in names and len(names) == 4, names
    app.close()
    print("ok")
