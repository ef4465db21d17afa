"""A job read by ``get_job`` is one moment's job: its row and its attempts
history come from the same snapshot, on every backend. Read in two statements
as they were, a release committing between them showed a job still running
whose history already held that release (``test_prefetch`` tripped on it under
load)."""

from __future__ import annotations

import threading
import time

import pytest

from tether.model import Outcome
from tether.store import Store

from .conftest import STORE_BACKENDS, backend_param
from .test_conformance import TTL, W, new_job


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


def test_get_job_reads_the_row_and_its_attempts_at_one_moment(store: Store) -> None:
    (job_id,) = store.enqueue([new_job()])
    stop = threading.Event()
    cycles = [0]

    def churn() -> None:  # claim and hand back, over and over: each hand-back writes an attempt row
        while not stop.is_set():
            for job in store.claim(W, ["default"], 1, TTL):
                store.release(W, job.id, job.attempt)
                cycles[0] += 1

    writer = threading.Thread(target=churn, daemon=True)
    writer.start()
    torn: list[str] = []
    reads = 0
    deadline = time.monotonic() + 3.0
    try:
        while time.monotonic() < deadline and not torn:
            job = store.get_job(job_id)
            assert job is not None
            reads += 1
            # every attempt here is a hand-back: those get_job leaves out (past
            # MAX_ATTEMPTS_SHOWN) are counted in older_attempts, read with the rest
            handed_back = sum(a.outcome is Outcome.RELEASED for a in job.attempts) + job.older_attempts
            if handed_back != job.released:  # the release statement writes both, in one transaction
                torn.append(f"read {reads}: released={job.released} but {handed_back} released attempts")
    finally:
        stop.set()
        writer.join(10)
    assert torn == []
    assert cycles[0] > 20, "the writer barely ran: the test proved nothing"
