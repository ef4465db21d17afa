"""Schedules managed at run time: add, trigger, pause, resume, remove.

Run it as `python runtime.py` (a SQLite file in a temporary directory), or
with TETHER_DATABASE_URL set to your database or to a `tether server` URL
(with TETHER_TOKEN)."""

import os
import tempfile

from tether import JobContext, ScheduleNotFound, Tether

# --8<-- [start:app]
url = os.environ.get("TETHER_DATABASE_URL") or f"sqlite:///{tempfile.mkdtemp()}/tether.db"
app = Tether(url)


@app.task(name="reports.nightly", queue="reports")
def nightly(ctx: JobContext, shop: int) -> str:
    return f"report for shop {shop}, tick {ctx.scheduled_for}"
# --8<-- [end:app]


if __name__ == "__main__":
    app.migrate()
    # --8<-- [start:manage]
    # 02:00 in Paris, every day, from the next tick on; fired by every worker that runs reports.nightly
    app.add_schedule("reports.shop-7", "0 2 * * *", task="reports.nightly", args={"shop": 7},
                     timezone="Europe/Paris")
    [s] = [s for s in app.schedules() if s.name == "reports.shop-7"]
    print(s.name, s.cron, s.timezone, "next tick:", s.next_tick, "dynamic:", s.dynamic)

    job_id = app.trigger_schedule("reports.shop-7")  # one job now, recorded as a manual tick
    app.pause_schedule("reports.shop-7")              # its ticks are not fired...
    app.resume_schedule("reports.shop-7")             # ...until resumed, at its next tick (no catch-up)
    app.remove_schedule("reports.shop-7")             # dynamic schedules only; the jobs it made stay
    # --8<-- [end:manage]

    [done] = app.drain(queues=["reports"])  # what a worker would do with the triggered job
    print("job", job_id, done.state, app.get_job(job_id).result)
    try:
        app.pause_schedule("reports.shop-7")
    except ScheduleNotFound as exc:
        print("after remove:", exc)
    app.close()
