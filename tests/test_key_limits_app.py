"""Per-key limits through the app (issue 44): ``@app.task(limit_key=...)``
(a key, or a callable of the job's args, run on the producer at enqueue),
``.using(limit_key=...)``, ``app.configure_limit`` and ``app.limits()``, on
every store (through ``tether server`` too: what travels is the job's
``limit_key`` and the pattern's limits). Bad input is a ConfigError and
writes nothing. A real worker obeys the limit (the claim decides)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tether import ConfigError, JobContext, Tether
from tether.model import JobState, KeyLimits

from .test_search import app_fixture, backend_fixture  # noqa: F401  (the app and backend fixtures)

pytestmark = pytest.mark.filterwarnings("error")


def test_the_key_comes_from_the_args_or_the_call_and_shows_on_the_job(app: Tether) -> None:
    @app.task(queue="api", limit_key=lambda shop, **_: f"shop:{shop}")
    def call_shop_api(ctx: JobContext, shop: int, order: int) -> None: ...

    keyed = call_shop_api.enqueue(shop=7, order=1)
    given = call_shop_api.using(limit_key="shop:9").enqueue(shop=7, order=2)
    assert app.get_job(keyed).limit_key == "shop:7"  # type: ignore[union-attr]
    assert app.get_job(given).limit_key == "shop:9"  # type: ignore[union-attr]
    assert {j.limit_key for j in app.jobs(queue="api").jobs} == {"shop:7", "shop:9"}


def test_a_callable_that_raises_or_returns_no_key_enqueues_nothing(app: Tether) -> None:
    @app.task(limit_key=lambda shop, **_: {"bad": shop} if shop == 2 else f"s:{1 // shop}")
    def work(ctx: JobContext, shop: int) -> None: ...

    with pytest.raises(ConfigError, match="limit_key callable raised ZeroDivisionError"):
        work.enqueue(shop=0)
    with pytest.raises(ConfigError, match="not a key string"):
        work.enqueue(shop=2)
    with pytest.raises(ConfigError, match="limit_key"):
        work.using(limit_key="").enqueue(shop=1)
    with pytest.raises(ConfigError, match="limit_key"):
        work.using(limit_key=7).enqueue(shop=1)  # type: ignore[arg-type]
    assert app.jobs().jobs == []


def test_configure_limit_stores_each_pattern_and_limits_shows_them_with_their_use(app: Tether) -> None:
    app.configure_queue("api", concurrency=50)
    got = app.configure_limit("shop:*", concurrency=3, rate=(10, "1s"))
    assert got == KeyLimits("shop:*", 3, 10, 1.0)
    assert app.configure_limit("vip:1", concurrency=1) == KeyLimits("vip:1", 1, None, None)
    limits = app.limits()
    assert [q.queue for q in limits.queues] == ["api"]
    assert limits.keys == [KeyLimits("shop:*", 3, 10, 1.0), KeyLimits("vip:1", 1, None, None)]
    app.configure_limit("vip:1")  # no limits: the pattern goes
    assert [k.pattern for k in app.limits().keys] == ["shop:*"]


@pytest.mark.parametrize(("pattern", "options"), [
    ("", {"concurrency": 1}), ("   ", {"concurrency": 1}), ("a\tb", {"concurrency": 1}),
    ("shop:*", {"concurrency": 0}), ("shop:*", {"concurrency": -3}), ("shop:*", {"concurrency": "3"}),
    ("shop:*", {"rate": (10,)}), ("shop:*", {"rate": "10/1s"}), ("shop:*", {"rate": (10, "soon")}),
    ("shop:*", {"rate": (0, "1s")}), ("shop:*", {"rate": (10, 0)}), ("shop:*", {"rate": (1.5, "1s")}),
])
def test_bad_input_is_a_clear_error_and_writes_nothing(app: Tether, pattern: str, options: dict[str, object]) -> None:
    app.configure_limit("keep:*", concurrency=2)
    with pytest.raises(ConfigError):
        app.configure_limit(pattern, **options)  # type: ignore[arg-type]
    assert app.limits().keys == [KeyLimits("keep:*", 2, None, None)]


def test_a_worker_never_runs_more_of_a_key_than_its_limit(app: Tether, backend: str) -> None:
    """A real worker with 8 handler threads over 3 keys of 6 jobs, each key
    limited to 2: each handler records how many of its key run beside it."""
    if backend.startswith("http-"):
        pytest.skip("the conformance suite covers the claim through the server; one real worker here is enough")
    lock = threading.Lock()
    running: dict[str, int] = {}
    peak: dict[str, int] = {}
    gate = threading.Event()

    @app.task(limit_key=lambda key, **_: key)
    def hold(ctx: JobContext, key: str, i: int) -> None:
        with lock:
            running[key] = running.get(key, 0) + 1
            peak[key] = max(peak.get(key, 0), running[key])
        gate.wait(0.05)  # long enough for the other threads to claim beside it, if the claim let them
        with lock:
            running[key] -= 1

    app.configure_limit("k*", concurrency=2)
    for key in ("k1", "k2", "k3"):
        hold.enqueue_many([{"key": key, "i": i} for i in range(6)])
    asyncio.run(app.worker(concurrency=8, burst=True, poll_interval=0.05).run())
    assert app.store.stats().counts.get(("default", JobState.SUCCEEDED), 0) == 18
    assert all(v <= 2 for v in peak.values()), peak


def test_the_docs_example(backend: str, db_url: str, tmp_path: Path) -> None:
    """docs/examples/key-limits/example.py, as a reader runs it."""
    if backend not in ("sqlite", "postgresql"):
        pytest.skip("the example runs against a database URL")
    example = Path(__file__).resolve().parent.parent / "docs" / "examples" / "key-limits" / "example.py"
    env = {**os.environ, "TETHER_DATABASE_URL": db_url,
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    done = subprocess.run([sys.executable, str(example)], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "refused: limit 'shop:*': concurrency must be a whole number >= 1" in done.stdout
    assert "key limits: done" in done.stdout
