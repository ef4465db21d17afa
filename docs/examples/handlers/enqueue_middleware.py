"""Enqueue middleware: every job stamped with the current tenant before it is written."""

from __future__ import annotations

import contextvars

from tether import JobContext, JobSpec, Tether

app = Tether("sqlite:///:memory:")
current_tenant: contextvars.ContextVar[str | None] = contextvars.ContextVar("tenant", default=None)


# --8<-- [start:stamp]
@app.enqueue_middleware
def stamp(spec: JobSpec) -> JobSpec:
    # every job this app makes passes here before it is written
    return spec.with_meta(tenant=current_tenant.get())


@app.task()
def invoice(ctx: JobContext, order: int) -> None:
    print(f"invoice {order} for tenant {ctx.meta['tenant']}")
# --8<-- [end:stamp]


if __name__ == "__main__":
    current_tenant.set("acme")  # say, set by your web framework per request
    job_id = invoice.enqueue(order=7)
    job = app.get_job(job_id)
    assert job is not None and job.meta == {"tenant": "acme"}, job
    app.drain()
    print("stamped:", job.meta)
