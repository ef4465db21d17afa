"""Uniqueness windows and expiry: the example of
docs/how-to/uniqueness-and-expiry.md, run by tests/test_dedup_window.py
(test_the_docs_example) on SQLite and PostgreSQL.

    TETHER_DATABASE_URL=sqlite:///example.db python example.py
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

from tether import ConfigError, JobContext, JobState, Outcome, Tether

app = Tether(os.environ.get("TETHER_DATABASE_URL", "sqlite:///example.db"))
ran: list[str] = []


# --8<-- [start:tasks]
@app.task()
def handle_webhook(ctx: JobContext, event_id: str) -> None:
    ran.append(event_id)


@app.task()
def send_code(ctx: JobContext, phone: str) -> None:
    ran.append(phone)
# --8<-- [end:tasks]


def main() -> None:
    app.migrate()

    # --8<-- [start:dedup]
    event = "evt_1"
    jid = handle_webhook.using(dedup_key=f"stripe:{event}", dedup_for="1h").enqueue(event_id=event)
    assert jid.duplicate is False                 # an int: the new job's id

    again = handle_webhook.using(dedup_key=f"stripe:{event}", dedup_for="1h").enqueue(event_id=event)
    assert again == jid and again.duplicate       # the same job; nothing was added
    # --8<-- [end:dedup]

    # --8<-- [start:after]
    app.run_worker(burst=True)                    # the job runs and ends...
    assert app.get_job(jid).state is JobState.SUCCEEDED  # type: ignore[union-attr]
    late = handle_webhook.using(dedup_key=f"stripe:{event}", dedup_for="1h").enqueue(event_id=event)
    assert late == jid and late.duplicate         # ...and its key stays taken for the hour
    assert ran == [event]
    # --8<-- [end:after]

    # --8<-- [start:expiry]
    code = send_code.using(expires="10m").enqueue(phone="+15550100")
    at = datetime.now(UTC) + timedelta(minutes=10)
    report = send_code.using(expires_at=at).enqueue(phone="+15550101")
    assert app.get_job(report).expires_at == at  # type: ignore[union-attr]

    try:  # an expiry that has passed, or one before the job is due to run, is refused
        send_code.using(expires="5m", delay=600).enqueue(phone="+15550102")
    except ConfigError as exc:
        print(exc)  # ... the job would expire (...) before it is due to run (...)
    # --8<-- [end:expiry]

    # --8<-- [start:expired]
    stale = send_code.using(expires=0.5).enqueue(phone="+15550199")
    time.sleep(0.6)                               # no worker took it in time
    app.run_worker(burst=True)                    # runs the fresh ones; the expired one never starts
    assert "+15550199" not in ran and sorted(ran[1:]) == ["+15550100", "+15550101"]
    job = app.get_job(stale)
    assert job is not None and job.attempts_used == 0
    # the expiry service ends it: cancelled, its attempts row's outcome "expired"
    assert job.state is JobState.QUEUED or [a.outcome for a in job.attempts] == [Outcome.EXPIRED]
    # --8<-- [end:expired]
    print(f"webhook job {jid}, code job {code}: done")


if __name__ == "__main__":
    try:
        main()
    finally:
        app.close()
