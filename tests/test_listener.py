"""The PostgreSQL LISTEN thread (``NotifyListener``): it hands on each
notification's payload, and ``close()`` ends it at once rather than at its
next idle check (a worker's every stop waited a second for it)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tether.store import open_store
from tether.store.postgres import listener as listener_module
from tether.store.postgres.store import PostgresStore

from .test_conformance import new_job

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


@pytest.fixture
def pg(db_url: str) -> Iterator[PostgresStore]:
    store = open_store(db_url)
    assert isinstance(store, PostgresStore)
    store.migrate()
    yield store
    store.close()


def _healthy(listener: object) -> None:
    deadline = time.monotonic() + 10
    while not getattr(listener, "healthy"):  # noqa: B009 - a Listener property
        assert time.monotonic() < deadline, "the LISTEN connection never came up"
        time.sleep(0.02)


def test_each_enqueue_reaches_the_listener_with_its_queue(pg: PostgresStore) -> None:
    heard: list[str] = []
    got = threading.Event()

    def on_enqueue(queue: str) -> None:
        if queue != "*":  # "*": (re)connected, something may have landed meanwhile
            heard.append(queue)
            if len(heard) == 3:
                got.set()

    listener = pg.listen(on_enqueue)
    assert listener is not None
    try:
        _healthy(listener)
        for queue in ("one", "two", "ünï"):
            pg.enqueue([new_job(queue=queue)])
        assert got.wait(5), f"heard only {heard}"
        assert heard == ["one", "two", "ünï"]
    finally:
        listener.close()


def test_close_wakes_the_listening_thread_at_once(pg: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing arriving the thread would sleep IDLE_CHECK (made 60 s
    here); close() wakes it, so it has ended when close() returns, without
    waiting out a timer (psycopg's notifies(timeout=1.0), before, made close()
    take the rest of that second: 0.9 s here)."""
    monkeypatch.setattr(listener_module, "IDLE_CHECK", 60.0)
    listener = pg.listen(lambda queue: None)
    assert isinstance(listener, listener_module.NotifyListener)
    _healthy(listener)
    time.sleep(0.1)  # the thread is in its wait by now
    started = time.monotonic()
    listener.close()
    took = time.monotonic() - started
    assert not listener._thread.is_alive()
    assert took < 0.5, f"close() took {took:.2f}s: it waited for a timer, not for the thread"


def test_close_after_the_thread_ended_still_closes_the_wake_socket(backend: str) -> None:
    """When the database is unreachable the thread waits between reconnects;
    close() sets the stop flag first, so the thread may end (closing its end
    of the wake-up pair) before close() writes its wake-up byte. That write
    then failed with a broken pipe and close() skipped closing its own end:
    an unclosed socket, a ResourceWarning at garbage collection (CI failed on
    it once, after the test that blackholes the database)."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    listener = listener_module.NotifyListener(f"postgresql://postgres@127.0.0.1:{port}/none?connect_timeout=1",
                                              "tether_enqueue", lambda _: None)
    time.sleep(0.3)  # the first connection attempt has failed: it waits to try again
    listener._stop.set()
    listener._thread.join(5)
    assert not listener._thread.is_alive()
    listener.close()
    assert listener._wake_w.fileno() == -1 and listener._wake_r.fileno() == -1
