"""The failover judgement (tether.chaos.failover_check): with synchronous
replication anything acknowledged and lost breaks the contract; with
asynchronous replication what was acknowledged inside a failover's loss
window (last replayed commit -> the kill) is counted as the expected loss
and set aside, anything outside it still breaks the contract, and a stale
owner's write accepted after the failover is a broken fence either way."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from tether.chaos.checker import AttemptRow, CheckReport, JobRow
from tether.chaos.failover_check import judge_failovers
from tether.chaos.pgpair import Failover

from .test_checker import T0, ev, run

#: one failover: the standby replayed everything committed up to +10.0, the primary died at +11.0
FAILOVER = Failover(killed_at=T0 + 11.0, promoted_at=T0 + 11.3, ready_at=T0 + 15.0, last_replayed=T0 + 10.0,
                    lag=1.0, standby_since=T0)


def enqueued(m: float, *ids: int) -> dict[str, Any]:
    return {**ev("enqueued", m, "driver", jobs=list(ids)), "t": T0 + m}


def done(job: int, w: str, at: float) -> tuple[list[dict[str, Any]], JobRow, AttemptRow]:
    """Job ``job``, enqueued at +1, claimed by ``w`` and completed at ``at``."""
    events = [enqueued(1.0, job), ev("claimed", at - 0.5, w, job=job, attempt=1, sent=at - 0.51),
              ev("report", at, w, job=job, attempt=1, op="complete", accepted=True, sent=at - 0.01)]
    return events, JobRow(job, "succeeded", 1, {"attempt": 1}), AttemptRow(job, 1, w, T0 + at - 0.5, T0 + at,
                                                                            "succeeded")


def judge(events: list[dict[str, Any]], jobs: list[JobRow], attempts: list[AttemptRow], *, synchronous: bool,
          enqueue_order: list[int], created: dict[int, float] | None = None) -> CheckReport:
    report = run(events, jobs, attempts, enqueued=enqueue_order)
    return judge_failovers(report, events, {j.id: j for j in jobs}, attempts, failovers=[FAILOVER],
                           created=created or {j.id: T0 + 0.9 for j in jobs}, mono_to_wall=T0,
                           synchronous=synchronous)


def lost_enqueue() -> tuple[list[dict[str, Any]], list[JobRow], list[AttemptRow]]:
    """Job 1 ran clean; job 2 was acknowledged at +10.5, in the loss window, and is gone."""
    events, job, attempt = done(1, "w1", 5.0)
    return [*events, enqueued(10.5, 2)], [job], [attempt]


def test_synchronous_an_acknowledged_enqueue_lost_breaks_the_contract() -> None:
    events, jobs, attempts = lost_enqueue()
    report = judge(events, jobs, attempts, synchronous=True, enqueue_order=[1, 2])
    assert not report.ok and "job 2" in report.invariants["I1"].violations[0]
    assert report.expected_loss["enqueues_lost"] == 1 and report.expected_loss["violations_excused"] == 0


def test_asynchronous_an_enqueue_lost_in_the_window_is_the_expected_loss() -> None:
    events, jobs, attempts = lost_enqueue()
    report = judge(events, jobs, attempts, synchronous=False, enqueue_order=[1, 2])
    assert report.ok, report.to_dict()
    loss = report.to_dict()["expected_loss"]
    assert loss["enqueues_lost"] == 1 and loss["jobs_touched_by_loss"] == 1 and loss["loss_window_s"] == 1.0
    assert loss["excused"] == ["I1 job 2: acknowledged at enqueue but missing from the database"]


def test_asynchronous_a_loss_outside_the_window_still_breaks_the_contract() -> None:
    events, jobs, attempts = lost_enqueue()
    events[-1] = enqueued(8.0, 2)  # acknowledged before the last replayed commit: the standby had it
    report = judge(events, jobs, attempts, synchronous=False, enqueue_order=[1, 2])
    assert not report.ok and report.expected_loss["violations_excused"] == 0


def test_an_acknowledged_id_given_to_a_later_job_is_a_lost_enqueue() -> None:
    """The identity sequence rolls back with the lost WAL: the next enqueue
    reuses the id, and I1 alone would find it terminal and pass."""
    events, job, attempt = done(7, "w1", 13.0)
    # the first job 7 acknowledged at +10.5 and lost; the row with id 7 made at +12.0, for the second
    events[0:1] = [enqueued(10.5, 7), enqueued(12.1, 7)]
    created = {7: T0 + 12.0}
    sync = judge(events, [job], [attempt], synchronous=True, enqueue_order=[7, 7], created=created)
    assert not sync.ok and "another job got the id" in sync.invariants["I1"].violations[0]
    asyn = judge(events, [job], [attempt], synchronous=False, enqueue_order=[7, 7], created=created)
    assert asyn.ok and asyn.expected_loss["enqueues_lost_id_reused"] == 1


def test_a_lost_completion_and_an_attempt_granted_twice_are_counted_and_the_fence_judged() -> None:
    """w1 claimed and completed job 3's attempt 1 inside the window; both were
    lost, and the new primary granted attempt 1 again, to w2, who completed
    it. w1's heartbeat after the promotion (it still ran a handler) was refused."""
    events = [enqueued(1.0, 3),
              ev("claimed", 10.2, "w1", job=3, attempt=1, sent=10.19),
              ev("report", 10.6, "w1", job=3, attempt=1, op="complete", accepted=True, sent=10.59),
              ev("claimed", 12.0, "w2", job=3, attempt=1, sent=11.99),
              ev("hb", 12.2, "w1", job=3, attempt=1, beat="lost", sent=12.19),
              ev("report", 12.5, "w2", job=3, attempt=1, op="complete", accepted=True, sent=12.49)]
    jobs = [JobRow(3, "succeeded", 1, {"attempt": 1})]
    attempts = [AttemptRow(3, 1, "w2", T0 + 12.0, T0 + 12.5, "succeeded")]
    report = judge(events, jobs, attempts, synchronous=False, enqueue_order=[3])
    assert report.ok, report.to_dict()
    loss = report.expected_loss
    assert loss["completions_lost"] == 1 and loss["attempts_granted_twice"] == 1
    assert loss["stale_writes_after_failover"] == 1 and loss["stale_writes_refused"] == 1
    # The same heartbeat accepted: locked_by did not fence, and no loss excuses that.
    events[4] = ev("hb", 12.2, "w1", job=3, attempt=1, beat="renewed", sent=12.19)
    broken = judge(events, jobs, attempts, synchronous=False, enqueue_order=[3])
    assert not broken.ok and broken.invariants["I3"].violations[0].startswith("fence broken: job 3 attempt 1")


def test_i7_judges_an_effect_of_a_job_whose_enqueue_was_never_acknowledged(tmp_path: Path) -> None:
    """A failover (or restart) can lose the answer to an enqueue that
    committed: the producer counts it as refused, yet the job runs and
    writes its effect. I7 must judge that effect against the job's own
    attempts, not call it a stale attempt's for want of them (a 10-minute
    synchronous failover run reported two such jobs as broken)."""
    from tether.chaos.effects import TX_TASKS, Effects
    from tether.store import open_store

    from .test_conformance import new_job

    url = f"sqlite:///{tmp_path / 'x.db'}"
    store = open_store(url)
    try:
        store.migrate()
        effects = Effects(url)
        effects.create()
        [job_id] = store.enqueue([new_job(task=TX_TASKS[0])])  # acknowledged, but "not heard" below
        [claimed] = store.claim("w1", ["default"], 1, 30.0)
        with sqlite3.connect(tmp_path / "x.db") as conn:
            conn.execute(effects.insert, (job_id, claimed.attempt, "w1"))
        assert store.complete("w1", [(job_id, claimed.attempt, None)]) == {job_id}
        report = CheckReport(invariants={}, recovery={}, counts={}, bound=3.0)
        judged = effects.judge(report, {}, [], store)  # the producer never heard back: no jobs of its own
        assert judged.invariants["I7"].ok, judged.invariants["I7"].violations
        assert judged.invariants["I7"].checked == 1
    finally:
        store.close()
