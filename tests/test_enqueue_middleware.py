"""``@app.enqueue_middleware`` (issue 45): every job the app makes passes its
enqueue middleware, in registration order, before it is written: a single
enqueue, ``enqueue_many``, ``app.enqueue`` by name, a workflow's steps and a
batch's members and callbacks (their specs, when made). What one raises, or a
wrong return, reaches the caller and writes nothing. On each backend's real
database (the app API's stores)."""

from __future__ import annotations

import contextvars
from typing import Any

import pytest

from tether import ConfigError, JobContext, JobSpec, PayloadError, Tether

TENANT: contextvars.ContextVar[str | None] = contextvars.ContextVar("tenant", default=None)


def _app(app: Tether) -> Any:
    @app.task(name="mw.work")
    def work(ctx: JobContext, n: int) -> int:
        return n

    @app.task(name="mw.done")
    def done(ctx: JobContext) -> None: ...

    return work, done


def test_every_way_to_enqueue_passes_the_middleware_in_order(flows_app: Tether) -> None:
    app = flows_app
    work, done = _app(app)
    seen: list[str] = []

    @app.enqueue_middleware
    def stamp(spec: JobSpec) -> JobSpec:
        seen.append(f"stamp {spec.name} {spec.args}")
        return spec.with_meta(tenant=TENANT.get())

    @app.enqueue_middleware
    def second(spec: JobSpec) -> JobSpec:  # registered later: sees the first one's meta
        return spec.with_meta(stamped_by=f"second after {spec.meta.get('tenant')}")

    TENANT.set("acme")
    ids = [work.enqueue(n=1), *work.enqueue_many([{"n": 2}, {"n": 3}]), app.enqueue("mw.work", n=4),
           work.using(meta={"source": "api"}).enqueue(n=5)]
    wf = app.workflow("stamped")
    first = wf.add(work.spec(n=6))
    wf.add(done.spec(), after=[first])
    run = wf.enqueue()
    with app.batch(on_complete=done.spec()) as batch:
        batch.add(work.spec(n=7))
    made = [*ids, *run.jobs.values(), *batch.jobs, *batch.callbacks.values()]
    assert len(made) == 5 + 2 + 1 + 1
    for jid in made:
        job = app.get_job(jid)
        assert job is not None
        assert job.meta is not None and job.meta["tenant"] == "acme", job
        assert job.meta["stamped_by"] == "second after acme"
    assert app.get_job(ids[4]).meta["source"] == "api"  # type: ignore[union-attr]  (kept beside the stamp)
    assert seen[:5] == [f"stamp work {{'n': {n}}}" for n in range(1, 6)]


def test_a_middleware_that_raises_or_returns_no_spec_writes_nothing(flows_app: Tether) -> None:
    app = flows_app
    work, _ = _app(app)

    @app.enqueue_middleware
    def refuse(spec: JobSpec) -> JobSpec:
        if spec.args["n"] < 0:
            raise PermissionError("negative work is not allowed for this tenant")
        return None if spec.args["n"] == 13 else spec  # type: ignore[return-value]

    with pytest.raises(PermissionError, match="negative work"):
        work.enqueue(n=-1)
    with pytest.raises(ConfigError, match="must return a JobSpec"):
        work.enqueue_many([{"n": 1}, {"n": 13}])
    assert app.count_jobs() == 0
    assert app.get_job(work.enqueue(n=2)) is not None


def test_with_meta_is_checked_as_using_meta_is(flows_app: Tether) -> None:
    app = flows_app
    work, _ = _app(app)

    @app.enqueue_middleware
    def huge(spec: JobSpec) -> JobSpec:
        return spec.with_meta(blob="x" * 10_000)

    with pytest.raises(PayloadError, match="meta"):
        work.enqueue(n=1)
    assert app.count_jobs() == 0


def test_registration_is_checked() -> None:
    app = Tether("sqlite:///:memory:")
    with pytest.raises(ConfigError, match="takes a function"):
        app.enqueue_middleware(42)  # type: ignore[type-var]
    with pytest.raises(ConfigError, match="must take"):
        app.enqueue_middleware(lambda: None)  # type: ignore[arg-type,type-var]

    def keep(spec: JobSpec) -> JobSpec:
        return spec

    app.enqueue_middleware(keep)
    with pytest.raises(ConfigError, match="twice"):
        app.enqueue_middleware(keep)
    app.close()


def test_the_docs_example_runs() -> None:
    """docs/examples/handlers/enqueue_middleware.py, run as a script."""
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "docs/examples/handlers/enqueue_middleware.py"
    run = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "invoice 7 for tenant acme" in run.stdout and "stamped: {'tenant': 'acme'}" in run.stdout
