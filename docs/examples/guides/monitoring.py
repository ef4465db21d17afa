"""The how-to "Monitoring": an event hook, the JSON log formatter,
OpenTelemetry and Prometheus metrics in your own process. Run by
tests/test_docs_guides.py as a script (with the otel and metrics extras)."""

import io
import json
import logging

from tether import JobContext, Tether

# --8<-- [start:events-import]
from tether.events import Event

# --8<-- [end:events-import]
from tether.logs import JsonFormatter

# --8<-- [start:otel]
from tether.otel import instrument

app = Tether()
instrument(app)  # where the app is defined, so producers and workers both get it;
# tracer_provider=... to use one other than the global provider
# --8<-- [end:otel]
failures: list[tuple[int, str]] = []


@app.task(max_attempts=1)
def flaky(ctx: JobContext) -> None:
    raise RuntimeError("upstream said no")


# --8<-- [start:events]
@app.on("job.failed")
def report(event: Event) -> None:
    print(event.job_id, event.attempt, event.task, event.worker, event.error)
    failures.append((event.job_id, event.error or ""))
# --8<-- [end:events]


if __name__ == "__main__":
    app.migrate()
    # --8<-- [start:logs]
    handler = logging.StreamHandler()  # stderr: one JSON object per line
    handler.setFormatter(JsonFormatter())  # what `tether worker --log-format json` uses
    logging.getLogger("tether").addHandler(handler)
    # --8<-- [end:logs]
    # --8<-- [start:metrics]
    from tether.metrics import Metrics

    metrics = Metrics().attach(app).watch_store(app.store)  # serve metrics.registry as you like
    # --8<-- [end:metrics]
    out = io.StringIO()
    handler.setStream(out)
    job_id = flaky.enqueue()
    app.drain()
    assert failures and failures[0][0] == job_id and "upstream said no" in failures[0][1], failures
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert any(r.get("job_id") == job_id for r in records), records
    from prometheus_client import generate_latest

    exposition = generate_latest(metrics.registry).decode()
    assert 'tether_jobs_total{outcome="dead",task="monitoring.flaky"} 1.0' in exposition, exposition
    app.close()
    print("ok")
