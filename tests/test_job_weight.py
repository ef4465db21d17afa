"""One job cannot be made to weigh hundreds of megabytes (issue 41, item 5):
args, meta and results nest at most ``MAX_NESTING`` deep; the dashboard
shows large values cut, off the event loop; and (test_conformance_workers.py)
what a store keeps of failures and what ``get_job`` returns are bounded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tether import JobContext, Tether
from tether.dashboard import create_app
from tether.dashboard.server import PRETTY_CHARS, _pretty
from tether.errors import PayloadError
from tether.model import JobState, NewJob
from tether.payload import MAX_NESTING, dump_json

TOKEN = "dashboard-token-0123456789"


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_payloads_nest_at_most_max_nesting_deep() -> None:
    assert MAX_NESTING == 64
    dump_json(nested(MAX_NESTING), "args", 10**6)
    dump_json({"a": nested(MAX_NESTING - 1)}, "args", 10**6)
    for too_deep in (nested(MAX_NESTING + 1), {"a": nested(MAX_NESTING)}, nested(900)):
        with pytest.raises(PayloadError, match="nests more than 64 levels"):
            dump_json(too_deep, "args", 10**6)


def test_enqueue_refuses_deep_args(tmp_path: Path) -> None:
    app = Tether(f"sqlite:///{tmp_path / 'w.db'}")
    app.migrate()

    @app.task(name="t")
    def t(ctx: JobContext, data: Any) -> None: ...

    try:
        with pytest.raises(PayloadError, match="nests"):
            t.enqueue(data=nested(MAX_NESTING + 1))
        assert app.store.list_jobs() == []
    finally:
        app.close()


def test_a_result_nested_too_deep_ends_the_job_dead_with_the_reason(tmp_path: Path) -> None:
    app = Tether(f"sqlite:///{tmp_path / 'w.db'}")
    app.migrate()

    @app.task(name="deep", max_attempts=1)
    def deep(ctx: JobContext) -> Any:
        return nested(MAX_NESTING + 10)

    try:
        job_id = deep.enqueue()
        app.drain()
        job = app.get_job(job_id)
        assert job is not None and job.state is JobState.DEAD, job
        assert job.last_error is not None and "nests more than 64 levels" in job.last_error
    finally:
        app.close()


def test_a_huge_value_is_shown_cut() -> None:
    shown = _pretty(nested(900))  # a row written before the limit: pretty-printed, it would be megabytes
    assert len(shown) <= PRETTY_CHARS + 100 and shown.endswith(")")
    shown = _pretty(nested(5000))  # deeper than the encoder's stack: cut where it failed
    assert len(shown) <= PRETTY_CHARS + 100
    assert _pretty({"a": [1, 2]}) == '{\n  "a": [\n    1,\n    2\n  ]\n}'


def test_a_deep_job_page_is_cut_and_rendered_off_the_event_loop(tmp_path: Path) -> None:
    """A job written before the limit (straight into the store, as an old
    release could) with args nested 900 deep: its page is cut to a few
    dozen kilobytes, and while it renders the event loop stays free."""
    app = Tether(f"sqlite:///{tmp_path / 'd.db'}")
    app.migrate()
    deep = "[" * 900 + "1" + "]" * 900
    (job_id,) = app.store.enqueue([NewJob("t", '{"x": ' + deep + "}")])
    dashboard = create_app(app, token=None, allowed_hosts=["testserver"])
    try:
        with TestClient(dashboard) as client:
            r = client.get(f"/jobs/{job_id}")
            assert r.status_code == 200 and len(r.text) < 10 * PRETTY_CHARS, len(r.text)
            assert "cut at" in r.text or "too deeply nested" in r.text

        async def page_while_the_loop_ticks() -> int:
            """Ticks of a 1 ms timer the loop ran while the page rendered: none if the page held the loop."""
            ticks = 0
            done = asyncio.Event()

            async def ticker() -> None:
                nonlocal ticks
                while not done.is_set():
                    await asyncio.sleep(0.001)
                    ticks += 1

            sent: list[MutableMapping[str, Any]] = []

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": b"", "more_body": False}

            async def send(message: MutableMapping[str, Any]) -> None:
                sent.append(message)

            scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
                     "scheme": "http", "path": f"/jobs/{job_id}", "raw_path": f"/jobs/{job_id}".encode(),
                     "query_string": b"", "root_path": "", "headers": [(b"host", b"testserver")],
                     "client": ("127.0.0.1", 1), "server": ("testserver", 80)}
            task = asyncio.create_task(ticker())
            await asyncio.sleep(0.01)
            before = ticks
            start = time.monotonic()
            await dashboard(scope, receive, send)
            elapsed = time.monotonic() - start
            done.set()
            await task
            assert sent[0]["status"] == 200
            return ticks - before if elapsed > 0.05 else -1

        ticks = asyncio.run(page_while_the_loop_ticks())
        assert ticks != 0, "the page held the event loop for all of its rendering"
    finally:
        app.close()


def test_tether_job_says_how_many_older_attempts_it_leaves_out(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tether.cli.main import cli
    from tether.model import MAX_ATTEMPTS_SHOWN, Outcome

    db = f"sqlite:///{tmp_path / 'c.db'}"
    app = Tether(db)
    app.migrate()
    store = app.store
    (job_id,) = store.enqueue([NewJob("t", "{}")])
    for _ in range(MAX_ATTEMPTS_SHOWN + 5):
        (c,) = store.claim("w", ["default"], 1, 30)
        store.fail("w", c.id, c.attempt, outcome=Outcome.SNOOZED, error="later", delay=0)
    app.close()
    result = CliRunner().invoke(cli, ["-d", db, "job", str(job_id)])
    assert result.exit_code == 0, result.output
    assert f"5 older attempt(s) not shown: the newest {MAX_ATTEMPTS_SHOWN} are" in result.output
