"""Middleware around every handler, and failures sent to Sentry with the live exception."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

import sentry_sdk

from tether import JobContext, Tether
from tether.events import Event

app = Tether()  # TETHER_DATABASE_URL, else sqlite:///tether.db

TENANT: contextvars.ContextVar[str | None] = contextvars.ContextVar("tenant", default=None)


# --8<-- [start:middleware]
@app.middleware  # def middleware wraps def handlers, on the handler's own thread (or child process)
def tenant(ctx: JobContext, call_next: Callable[[], Any]) -> Any:
    token = TENANT.set(ctx.args.get("tenant"))
    try:
        return call_next()  # the handler (and any middleware registered after this one)
    finally:
        TENANT.reset(token)


@app.middleware  # async def middleware wraps async def handlers, in the handler's task
async def tenant_async(ctx: JobContext, call_next: Callable[[], Any]) -> Any:
    token = TENANT.set(ctx.args.get("tenant"))
    try:
        return await call_next()
    finally:
        TENANT.reset(token)
# --8<-- [end:middleware]


# --8<-- [start:sentry]
@app.on("job.failed")
def report(event: Event) -> None:
    if event.exception is None:  # a timeout, a cancel, a lapsed lease: nothing was raised here
        return
    with sentry_sdk.new_scope() as scope:
        scope.set_tag("tether.job_id", event.job_id)
        scope.set_tag("tether.task", event.task)
        scope.set_tag("tether.attempt", event.attempt)
        sentry_sdk.capture_exception(event.exception)
# --8<-- [end:sentry]


@app.task(name="charge", max_attempts=1)
def charge(ctx: JobContext, tenant: str, amount: int) -> dict[str, Any]:
    if amount < 0:
        raise ValueError(f"cannot charge {amount} to {TENANT.get()}")
    return {"tenant": TENANT.get(), "amount": amount}


@app.task(name="charge_async", max_attempts=1)
async def charge_async(ctx: JobContext, tenant: str, amount: int) -> dict[str, Any]:
    return {"tenant": TENANT.get(), "amount": amount}
