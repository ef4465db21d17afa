"""The chaos checker catches what it claims to catch: each test feeds it a
history with one planted violation and expects exactly that invariant to fail;
a clean history must pass."""

from __future__ import annotations

from typing import Any

import pytest

from tether.chaos.checker import AttemptRow, CheckReport, JobRow, check, healthy_spans

TTL, REAPER = 2.0, 1.0
T0 = 1_000_000.0  # wall clock of monotonic 0 in these histories


def ev(e: str, m: float, w: str = "w1", **kw: Any) -> dict[str, Any]:
    return {"e": e, "m": m, "t": T0 + m, "w": w, "pid": 1, **kw}


def run(events: list[dict[str, Any]], jobs: list[JobRow], attempts: list[AttemptRow],
        enqueued: list[int] | None = None, outages: list[tuple[float, float]] | None = None) -> CheckReport:
    return check(events, {j.id: j for j in jobs}, attempts, enqueued=enqueued or [j.id for j in jobs],
                 lease_ttl=TTL, reaper_interval=REAPER, mono_to_wall=T0, slack=0.5, outages=outages or [])


def clean() -> tuple[list[dict[str, Any]], list[JobRow], list[AttemptRow]]:
    """Job 1: worker w1 dies after claiming; w2 recovers it and succeeds."""
    events = [
        ev("claimed", 1.0, job=1, attempt=1, sent=0.99),
        ev("hb", 1.5, job=1, attempt=1, beat="renewed", sent=1.49),
        ev("claimed", 5.0, "w2", job=1, attempt=2, sent=4.99),
        ev("hb", 5.4, "w2", job=1, attempt=2, beat="renewed", sent=5.39),
        ev("report", 6.0, "w2", job=1, attempt=2, op="complete", accepted=True, sent=5.99),
    ]
    jobs = [JobRow(1, "succeeded", 2, {"attempt": 2})]
    attempts = [
        AttemptRow(1, 1, "w1", T0 + 1.0, T0 + 4.2, "lease_expired"),
        AttemptRow(1, 2, "w2", T0 + 5.0, T0 + 6.0, "succeeded"),
    ]
    return events, jobs, attempts


def failing(report: CheckReport) -> set[str]:
    return {k for k, v in report.invariants.items() if not v.ok}


def test_clean_history_passes() -> None:
    report = run(*clean())
    assert report.ok, report.to_dict()
    assert report.recovery["recoveries"] == 1
    assert report.recovery["max"] is not None and abs(report.recovery["max"] - 2.7) < 1e-6


def test_lost_job_is_flagged() -> None:
    events, jobs, attempts = clean()
    jobs.append(JobRow(2, "queued", 0, None))
    report = run(events, jobs, attempts)
    assert failing(report) == {"I1"}
    assert "job 2" in report.invariants["I1"].violations[0]


def test_enqueue_missing_from_database_is_flagged() -> None:
    events, jobs, attempts = clean()
    report = run(events, jobs, attempts, enqueued=[1, 99])
    assert failing(report) == {"I1"} and "job 99" in report.invariants["I1"].violations[0]


def test_overlapping_lease_is_flagged() -> None:
    events, jobs, attempts = clean()
    # attempt 1's heartbeat was sent after attempt 2 was granted, and accepted
    events.append(ev("hb", 5.6, job=1, attempt=1, beat="renewed", sent=5.5))
    report = run(events, jobs, attempts)
    assert "I2" in failing(report)
    assert "attempt 1" in report.invariants["I2"].violations[0]


def test_overlapping_windows_in_the_database_are_flagged() -> None:
    events, jobs, _ = clean()
    attempts = [
        AttemptRow(1, 1, "w1", T0 + 1.0, T0 + 5.5, "lease_expired"),
        AttemptRow(1, 2, "w2", T0 + 5.0, T0 + 6.0, "succeeded"),
    ]
    assert "I2" in failing(run(events, jobs, attempts))


def test_accepted_stale_write_is_flagged() -> None:
    events, jobs, attempts = clean()
    events.append(ev("report", 6.5, job=1, attempt=1, op="complete", accepted=True, sent=6.4))
    report = run(events, jobs, attempts)
    assert "I3" in failing(report)
    assert any("attempt 1" in v and "accepted" in v for v in report.invariants["I3"].violations)


def test_result_from_a_stale_attempt_is_flagged() -> None:
    events, _, attempts = clean()
    jobs = [JobRow(1, "succeeded", 2, {"attempt": 1})]
    assert "I3" in failing(run(events, jobs, attempts))


def test_attempt_number_granted_twice_is_flagged() -> None:
    events, jobs, attempts = clean()
    events.append(ev("claimed", 5.1, "w3", job=1, attempt=2, sent=5.05))
    assert "I3" in failing(run(events, jobs, attempts))


def test_double_finish_is_flagged() -> None:
    events, _, _ = clean()
    jobs = [JobRow(1, "succeeded", 2, {"attempt": 2})]
    attempts = [
        AttemptRow(1, 1, "w1", T0 + 1.0, T0 + 4.2, "succeeded"),
        AttemptRow(1, 2, "w2", T0 + 5.0, T0 + 6.0, "succeeded"),
    ]
    report = run(events, jobs, attempts)
    assert "I4" in failing(report)
    assert "succeeded 2 times" in report.invariants["I4"].violations[0]


def test_run_after_finish_is_flagged() -> None:
    events, jobs, attempts = clean()
    events.append(ev("claimed", 7.0, "w3", job=1, attempt=3, sent=6.9))
    assert "I4" in failing(run(events, jobs, attempts))


def test_slow_recovery_is_flagged() -> None:
    events, jobs, _ = clean()
    attempts = [
        AttemptRow(1, 1, "w1", T0 + 1.0, T0 + 1.5 + TTL + REAPER + 2.0, "lease_expired"),
        AttemptRow(1, 2, "w2", T0 + 5.0 + 2.0, T0 + 8.0, "succeeded"),
    ]
    report = run(events, jobs, attempts)
    assert "I5" in failing(report)


def test_slow_recovery_during_a_database_outage_is_excused_by_the_outage_only() -> None:
    events, jobs, _ = clean()
    reaped = T0 + 1.5 + TTL + REAPER + 2.0  # 2 s late
    attempts = [
        AttemptRow(1, 1, "w1", T0 + 1.0, reaped, "lease_expired"),
        AttemptRow(1, 2, "w2", reaped + 0.1, reaped + 1.0, "succeeded"),
    ]
    assert run(events, jobs, attempts, outages=[(T0 + 3.0, T0 + 4.0)]).ok  # 1 s down + reconnect grace
    assert "I5" in failing(run(events, jobs, attempts, outages=[(T0 + 100, T0 + 101)]))  # outage elsewhere


def test_slow_recovery_says_what_the_reapers_did() -> None:
    """A violation names reaper ticks that ran after the lapse and missed the
    row (a bug in the reap statement) apart from failed ticks and idle gaps."""
    events, jobs, _ = clean()
    reaped = T0 + 1.5 + TTL + REAPER + 2.0  # lease lapsed at m=3.5, recovered at m=6.5
    attempts = [
        AttemptRow(1, 1, "w1", T0 + 1.0, reaped, "lease_expired"),
        AttemptRow(1, 2, "w2", reaped + 0.1, reaped + 1.0, "succeeded"),
    ]
    events += [
        ev("reap", 4.1, "w2", started=4.0, ok=True, jobs=[]),        # ran after the lapse, missed it
        ev("reap", 5.2, "w3", started=4.2, ok=False, error="down"),  # failed
        ev("reap", 6.5, "w2", started=6.45, ok=True, jobs=[[1, 1]]),  # the one that took it
    ]
    report = run(events, jobs, attempts)
    (message,) = report.invariants["I5"].violations
    assert "1 ran and missed it, 1 failed" in message
    assert "longest wait for a tick 2.25s" in message  # from m=4.2 to m=6.45


def test_recovery_is_timed_from_the_database_s_last_renewal_even_one_the_worker_never_heard() -> None:
    """w1's last recorded renewal is at m=1.5, but a later renewal (its answer
    lost) reached the database: the reaper reports the lapsed lease_until, and
    recovery is timed from lease_until - ttl, not from what w1 heard."""
    events, jobs, _ = clean()
    lease_until = T0 + 5.0  # renewed by the database at m=3.0
    reaped = lease_until + 0.8
    attempts = [
        AttemptRow(1, 1, "w1", T0 + 1.0, reaped, "lease_expired"),
        AttemptRow(1, 2, "w2", reaped + 0.1, reaped + 1.0, "succeeded"),
    ]
    without = run(events, jobs, attempts)
    assert "I5" in failing(without)  # 4.3 s after the last renewal w1 heard of
    events.append(ev("reap", reaped - T0, "w2", started=reaped - T0 - 0.01, ok=True, jobs=[[1, 1, lease_until]]))
    report = run(events, jobs, attempts)
    assert report.ok
    assert report.recovery["renewals_unheard"] == 1
    assert report.recovery["max"] == pytest.approx(2.8)


def lifecycle(*, resume_at: float) -> list[dict[str, Any]]:
    """Two worker processes: w1 (pid 1, slot 0) claims job 1 and is killed at
    m=2.0; w2 (pid 2, slot 1) is stopped at m=3.0 and resumed at ``resume_at``.
    Job 1's lease (last renewed at m=1.5) lapses at m=3.5."""
    return [
        ev("spawn", 0.0, "driver", slot=0, pid=1), ev("spawn", 0.0, "driver", slot=1, pid=2),
        ev("started", 0.5, "w1", pid=1), ev("started", 0.6, "w2", pid=2),
        ev("claimed", 1.0, job=1, attempt=1, sent=0.99),
        ev("hb", 1.5, job=1, attempt=1, beat="renewed", sent=1.49),
        ev("fault", 2.0, "driver", kind="kill", slot=0, pid=1), ev("died", 2.05, "driver", slot=0, pid=1, code=-9),
        ev("fault", 3.0, "driver", kind="stop", slot=1, pid=2), ev("resume", resume_at, "driver", slot=1, pid=2),
    ]


def late(reaped_m: float) -> tuple[list[JobRow], list[AttemptRow]]:
    return [JobRow(1, "succeeded", 2, {"attempt": 2})], [
        AttemptRow(1, 1, "w1", T0 + 1.0, T0 + reaped_m, "lease_expired"),
        AttemptRow(1, 2, "w2", T0 + reaped_m + 0.1, T0 + reaped_m + 1.0, "succeeded"),
    ]


def test_recovery_is_not_judged_while_no_worker_was_healthy() -> None:
    """From the lapse (m=3.5) to w2's SIGCONT (m=5.5) no worker was healthy:
    w1 dead, w2 stopped. Reaped at m=6.3, 4.8 s after the last renewal, it is
    0.8 s after a healthy worker came back: within the bound, not a violation."""
    jobs, attempts = late(6.3)
    events = [*lifecycle(resume_at=5.5), ev("reap", 6.3, "w2", pid=2, started=6.28, ok=True, jobs=[[1, 1, None]])]
    report = run(events, jobs, attempts)
    assert report.ok, report.to_dict()
    assert report.not_judged == ["no healthy worker from +3.00s to +5.50s"]
    assert report.recovery["waited_on_no_healthy"] == 1
    assert report.recovery["waited_on_no_healthy_max"] == pytest.approx(2.0)


def test_recovery_is_judged_on_the_time_a_healthy_worker_existed() -> None:
    """The same recovery when w2 came back at m=4.0: it had 2.3 s to reap a
    lapsed lease with a 1 s reaper, and that is a violation naming the 0.5 s
    it is not charged for."""
    jobs, attempts = late(6.3)
    events = [*lifecycle(resume_at=4.0), ev("reap", 6.3, "w2", pid=2, started=6.28, ok=True, jobs=[[1, 1, None]])]
    report = run(events, jobs, attempts)
    (message,) = report.invariants["I5"].violations
    assert "recovered 4.80s after its last renewal (bound 3s + 0.5s slack + 0.50s with no healthy worker)" in message


def test_a_late_recovery_with_a_healthy_worker_throughout_is_flagged() -> None:
    """Lifecycle records do not excuse a recovery when some worker was healthy."""
    jobs, attempts = late(6.3)
    events = [e for e in lifecycle(resume_at=5.5) if e["e"] not in ("fault", "resume") or e["pid"] != 2]
    events.append(ev("reap", 6.3, "w2", pid=2, started=6.28, ok=True, jobs=[[1, 1, None]]))
    report = run(events, jobs, attempts)
    assert "I5" in failing(report)
    assert report.not_judged == []


def test_a_healed_partition_counts_from_the_worker_s_first_answer_after_the_heal() -> None:
    """w2 is cut off (blackhole) at m=3.0 and healed at m=4.0, but a request
    caught in the blackhole answers nothing: w2 is healthy again only from the
    first answer to a request sent after the heal (its tick sent at 4.9,
    answered at 5.3). A tick sent before the heal proves nothing."""
    jobs, attempts = late(6.0)
    events = [e for e in lifecycle(resume_at=5.5) if e["e"] not in ("fault", "resume") or e["pid"] != 2]
    events += [
        ev("fault", 3.0, "driver", kind="partition", mode="blackhole", slot=1),
        ev("heal", 4.0, "driver", slot=1, pid=2),
        ev("reap", 4.5, "w2", pid=2, started=2.9, ok=True, jobs=[]),  # sent before the heal
        ev("reap", 5.3, "w2", pid=2, started=4.9, ok=True, jobs=[]),  # the first answer since
        ev("reap", 6.0, "w2", pid=2, started=5.95, ok=True, jobs=[[1, 1, None]]),
    ]
    report = run(events, jobs, attempts)
    assert report.ok, report.to_dict()
    assert report.not_judged == ["no healthy worker from +3.00s to +5.30s"]
    # Had the heal counted, 2.5 s of healthy time without a tick would be a violation.
    healed = [e for e in events if not (e["e"] == "reap" and e["m"] == 5.3)]
    healed.append(ev("claimed", 4.2, "w2", pid=2, job=9, attempt=1, sent=4.1))
    report = run(healed, jobs, attempts)
    assert "I5" in failing(report)


def test_a_restarted_worker_whose_pid_was_reused_counts_as_healthy_again() -> None:
    """Pids are reused: after many restarts a new worker process may get a
    dead one's pid. Its spawn starts it afresh: healthy from its own
    ``started``, not held dead forever by its predecessor's kill."""
    events = [
        ev("spawn", 0.0, "driver", slot=0, pid=7), ev("started", 0.5, "w1", pid=7),
        ev("fault", 2.0, "driver", kind="kill", slot=0, pid=7), ev("died", 2.05, "driver", slot=0, pid=7, code=-9),
        ev("spawn", 3.0, "driver", slot=0, pid=7), ev("started", 3.4, "w3", pid=7),
        ev("claimed", 6.0, "w3", pid=7, job=9, attempt=1, sent=5.99),
    ]
    assert healthy_spans(events)[7] == [(0.5, 2.0), (3.4, 6.0)]


def test_on_sqlite_a_stopped_worker_leaves_no_healthy_worker() -> None:
    """On SQLite a worker stopped inside a write transaction holds the one
    write lock: w2's reaper could write nothing while w3 was stopped (m=2.5 to
    m=5.5), so a recovery at m=6.3 is judged on the time after the SIGCONT.
    The same run on PostgreSQL, where nothing waits for a stopped worker, is a
    violation."""
    jobs, attempts = late(6.3)
    events = [
        ev("spawn", 0.0, "driver", slot=0, pid=1), ev("spawn", 0.0, "driver", slot=1, pid=2),
        ev("spawn", 0.0, "driver", slot=2, pid=3),
        ev("started", 0.5, "w1", pid=1), ev("started", 0.6, "w2", pid=2), ev("started", 0.7, "w3", pid=3),
        ev("claimed", 1.0, job=1, attempt=1, sent=0.99),
        ev("hb", 1.5, job=1, attempt=1, beat="renewed", sent=1.49),
        ev("fault", 2.0, "driver", kind="kill", slot=0, pid=1), ev("died", 2.05, "driver", slot=0, pid=1, code=-9),
        ev("fault", 2.5, "driver", kind="stop", slot=2, pid=3), ev("resume", 5.5, "driver", slot=2, pid=3),
        ev("reap", 6.3, "w2", pid=2, started=6.28, ok=True, jobs=[[1, 1, None]]),
    ]
    assert "I5" in failing(run(events, jobs, attempts))
    report = check(events, {j.id: j for j in jobs}, attempts, enqueued=[1], lease_ttl=TTL, reaper_interval=REAPER,
                   mono_to_wall=T0, slack=0.5, sqlite=True)
    assert report.ok, report.to_dict()
    assert report.not_judged == ["no healthy worker from +2.50s to +5.50s"]


# -- I7: exactly-once effects (the transactional workload) ------------------------------------

from tether.chaos.effects import TX_TASKS, EffectRow, check_effects  # noqa: E402


def effects_history() -> tuple[dict[int, JobRow], dict[int, str], list[AttemptRow], list[EffectRow]]:
    """Job 1 (transactional): w1's attempt 1 was reaped, w2's attempt 2 succeeded
    and wrote the one effect. Job 2 (transactional): dead after a failed attempt,
    no effect. Job 3: an ordinary job, no effect."""
    jobs = {1: JobRow(1, "succeeded", 2, {"attempt": 2}), 2: JobRow(2, "dead", 1, None),
            3: JobRow(3, "succeeded", 1, {"attempt": 1})}
    tasks = {1: TX_TASKS[0], 2: TX_TASKS[1], 3: "tether.chaos.work"}
    attempts = [
        AttemptRow(1, 1, "w1", T0 + 1.0, T0 + 4.2, "lease_expired"),
        AttemptRow(1, 2, "w2", T0 + 5.0, T0 + 6.0, "succeeded"),
        AttemptRow(2, 1, "w1", T0 + 1.0, T0 + 2.0, "failed"),
        AttemptRow(3, 1, "w1", T0 + 1.0, T0 + 2.0, "succeeded"),
    ]
    return jobs, tasks, attempts, [EffectRow(1, 2, "w2")]


def test_i7_clean_effects_hold() -> None:
    inv = check_effects(*effects_history())
    assert inv.ok, inv.violations
    assert inv.checked == 2  # the transactional jobs


def test_i7_catches_a_zombie_attempts_effect() -> None:
    jobs, tasks, attempts, effects = effects_history()
    # attempt 1 of job 1 (reaped: a zombie) also got its write in
    inv = check_effects(jobs, tasks, attempts, [*effects, EffectRow(1, 1, "w1")])
    assert not inv.ok
    assert any("attempt 1" in v and "lease_expired" in v for v in inv.violations)
    assert any("succeeded with 2 effect rows" in v for v in inv.violations)


def test_i7_catches_a_missing_or_a_doubled_effect() -> None:
    jobs, tasks, attempts, _ = effects_history()
    missing = check_effects(jobs, tasks, attempts, [])
    assert [v for v in missing.violations if "succeeded with 0 effect rows" in v]
    doubled = check_effects(jobs, tasks, attempts, [EffectRow(1, 2, "w2"), EffectRow(1, 2, "w2")])
    assert [v for v in doubled.violations if "succeeded with 2 effect rows" in v]


def test_i7_catches_an_effect_of_a_failed_attempt_and_of_an_unrelated_job() -> None:
    jobs, tasks, attempts, effects = effects_history()
    inv = check_effects(jobs, tasks, attempts, [*effects, EffectRow(2, 1, "w1"), EffectRow(3, 1, "w1")])
    assert any("job 2" in v and "(failed)" in v for v in inv.violations)
    assert any("job 2: ended dead" in v for v in inv.violations)
    assert any("job 3" in v and "not a transactional job" in v for v in inv.violations)


def test_i7_catches_an_effect_of_an_unfinished_attempt_or_another_worker() -> None:
    jobs, tasks, attempts, _ = effects_history()
    unfinished = check_effects(jobs, tasks, attempts, [EffectRow(1, 2, "w2"), EffectRow(1, 3, "w3")])
    assert any("no finished attempt row" in v for v in unfinished.violations)
    impostor = check_effects(jobs, tasks, attempts, [EffectRow(1, 2, "w9")])
    assert any("names worker w9" in v for v in impostor.violations)


def test_on_sqlite_only_a_stop_that_holds_the_write_lock_excuses_the_others() -> None:
    """The driver probes SQLite's write lock right after each SIGSTOP. A worker
    stopped outside a write transaction leaves the others free to write: its
    stop excuses nothing, and the late recovery is a violation again."""
    jobs, attempts = late(6.3)
    events = [
        ev("spawn", 0.0, "driver", slot=0, pid=1), ev("spawn", 0.0, "driver", slot=1, pid=2),
        ev("spawn", 0.0, "driver", slot=2, pid=3),
        ev("started", 0.5, "w1", pid=1), ev("started", 0.6, "w2", pid=2), ev("started", 0.7, "w3", pid=3),
        ev("claimed", 1.0, job=1, attempt=1, sent=0.99),
        ev("hb", 1.5, job=1, attempt=1, beat="renewed", sent=1.49),
        ev("fault", 2.0, "driver", kind="kill", slot=0, pid=1), ev("died", 2.05, "driver", slot=0, pid=1, code=-9),
        ev("fault", 2.5, "driver", kind="stop", slot=2, pid=3),
        ev("stop_lock", 2.6, "driver", slot=2, pid=3, holds=False),
        ev("resume", 5.5, "driver", slot=2, pid=3),
        ev("reap", 6.3, "w2", pid=2, started=6.28, ok=True, jobs=[[1, 1, None]]),
    ]
    report = check(events, {j.id: j for j in jobs}, attempts, enqueued=[1], lease_ttl=TTL, reaper_interval=REAPER,
                   mono_to_wall=T0, slack=0.5, sqlite=True)
    assert "I5" in failing(report)
    holding = [dict(e, holds=True) if e["e"] == "stop_lock" else e for e in events]
    report = check(holding, {j.id: j for j in jobs}, attempts, enqueued=[1], lease_ttl=TTL, reaper_interval=REAPER,
                   mono_to_wall=T0, slack=0.5, sqlite=True)
    assert report.ok, report.to_dict()


# -- I9: dependencies released once, by the ending (workflows and batches) ---------------------

from tether.chaos.flows_check import Ended, Move, Start, Waiter, check_dependencies  # noqa: E402


def flows_history() -> tuple[list[Waiter], dict[int, Ended], list[Start], list[Move]]:
    """A chain 1 -> 2 -> 3 (3 runs whatever happened); a diamond 10 -> {11, 12} -> 13
    in which 11 died, so 13 (policy cancel) was cancelled at 11's ending; a
    batch of members 20, 21 (21 died) whose on_complete 30 fired once after the
    last member and whose on_success 31 was cancelled then. Times are the
    database's clock, T0 + seconds."""
    waiters = [
        Waiter(2, (1,), "cancel", "workflow 1 step b"), Waiter(3, (2,), "run", "workflow 1 step c"),
        Waiter(11, (10,), "cancel", "workflow 2 step b"), Waiter(12, (10,), "cancel", "workflow 2 step c"),
        Waiter(13, (11, 12), "cancel", "workflow 2 step d"),
        Waiter(30, (20, 21), "on_complete", "batch 1 on_complete"),
        Waiter(31, (20, 21), "on_success", "batch 1 on_success"),
    ]
    ended = {1: Ended("succeeded", T0 + 1.0), 2: Ended("succeeded", T0 + 2.0), 3: Ended("succeeded", T0 + 3.0),
             10: Ended("succeeded", T0 + 1.0), 11: Ended("dead", T0 + 2.0), 12: Ended("succeeded", T0 + 2.5),
             13: Ended("cancelled", T0 + 2.0),
             20: Ended("succeeded", T0 + 1.0), 21: Ended("dead", T0 + 4.0), 30: Ended("succeeded", T0 + 5.0),
             31: Ended("cancelled", T0 + 4.0)}
    starts = [Start(2, 1, T0 + 1.1, seen={"a": "succeeded"}), Start(2, 1, T0 + 1.05, "claim"),
              Start(3, 1, T0 + 2.2, seen={"b": "succeeded"}), Start(11, 1, T0 + 1.2, "claim"),
              Start(12, 1, T0 + 1.3, "claim"), Start(30, 1, T0 + 4.1, "claim"), Start(30, 1, T0 + 4.2)]
    moves = [Move(2, "waiting", "queued", T0 + 1.0), Move(3, "waiting", "queued", T0 + 2.0),
             Move(11, "waiting", "queued", T0 + 1.0), Move(12, "waiting", "queued", T0 + 1.0),
             Move(13, "waiting", "cancelled", T0 + 2.0),
             Move(30, "queued", "waiting", T0 + 0.5), Move(30, "waiting", "queued", T0 + 4.0),
             Move(31, "queued", "waiting", T0 + 0.5), Move(31, "waiting", "cancelled", T0 + 4.0)]
    return waiters, ended, starts, moves


def i9(waiters: list[Waiter], ended: dict[int, Ended], starts: list[Start], moves: list[Move],
       excused: list[tuple[float, float]] | None = None) -> list[str]:
    inv, _ = check_dependencies(waiters, ended, starts, moves, bound=REAPER, excused=excused or [], slack=0.5)
    return inv.violations


def test_i9_a_clean_history_holds() -> None:
    waiters, ended, starts, moves = flows_history()
    inv, counts = check_dependencies(waiters, ended, starts, moves, bound=REAPER, slack=0.5)
    assert inv.ok, inv.violations
    assert inv.checked == 7
    assert counts["i9_released"] == 5 and counts["i9_cancelled"] == 2 and counts["i9_callbacks_fired"] == 1


def test_i9_catches_a_step_started_before_its_dependency_ended() -> None:
    waiters, ended, starts, moves = flows_history()
    # step 2's claim came before step 1 ended (its handler's record is in order)
    bad = i9(waiters, ended, [*starts, Start(2, 1, T0 + 0.8, "claim")], moves)
    assert len(bad) == 1 and bad[0].startswith("job 2: workflow 1 step b: attempt 1 started (claimed)")
    assert "before its last dependency ended" in bad[0]


def test_i9_catches_a_cancel_step_that_ran_after_a_failed_dependency() -> None:
    waiters, ended, starts, moves = flows_history()
    bad = i9(waiters, ended, [*starts, Start(13, 1, T0 + 3.0, seen={"b": "dead", "c": "succeeded"})], moves)
    assert any(v.startswith("job 13:") and "did not succeed (policy cancel)" in v for v in bad)
    assert any(v.startswith("job 13:") and "handler read dependencies not succeeded" in v for v in bad)


def test_i9_catches_a_run_step_started_while_a_dependency_had_not_ended() -> None:
    waiters, ended, starts, moves = flows_history()
    ended[2] = Ended("running", None)
    bad = i9(waiters, ended, starts, [m for m in moves if m.job_id != 3])
    assert any(v.startswith("job 3:") and "1 of its 1 dependencies had not ended" in v for v in bad)
    # and released while that dependency was still running
    assert any(v.startswith("job 3:") and "left waiting (queued) though 1 of its dependencies never ended" in v
               for v in i9(waiters, ended, starts, moves))


def test_i9_catches_a_step_never_released_or_released_late_or_twice() -> None:
    waiters, ended, starts, moves = flows_history()
    never = i9(waiters, ended, starts, [m for m in moves if m.job_id != 2])
    assert len(never) == 1 and never[0].startswith("job 2:") and "never was released" in never[0]
    late = [Move(2, "waiting", "queued", T0 + 3.0) if m.job_id == 2 else m for m in moves]
    assert any(v.startswith("job 2:") and "was released 2.00s after" in v for v in i9(waiters, ended, starts, late))
    # the same lag, while no worker was healthy for 1.5 s of it: excused
    assert i9(waiters, ended, starts, late, excused=[(T0 + 1.2, T0 + 2.7)]) == []
    twice = [*moves, Move(2, "waiting", "queued", T0 + 1.5)]
    assert any(v.startswith("job 2:") and "was released 2 times" in v for v in i9(waiters, ended, starts, twice))


def test_i9_catches_a_release_before_the_ending_or_against_the_policy() -> None:
    waiters, ended, starts, moves = flows_history()
    early = [Move(3, "waiting", "queued", T0 + 1.5) if m.job_id == 3 else m for m in moves]
    assert any(v.startswith("job 3:") and "before the ending that decided it" in v
               for v in i9(waiters, ended, starts, early))
    # the diamond's join queued although its branch b died (its policy: cancel)
    wrong = [Move(13, "waiting", "queued", T0 + 2.5) if m.job_id == 13 else m for m in moves]
    assert any(v.startswith("job 13:") and "ask for cancelled" in v for v in i9(waiters, ended, starts, wrong))


def test_i9_catches_a_batch_callback_fired_twice_or_before_its_last_member_ended() -> None:
    waiters, ended, starts, moves = flows_history()
    twice = i9(waiters, ended, starts, [*moves, Move(30, "waiting", "queued", T0 + 4.3)])
    assert any(v.startswith("job 30: batch 1 on_complete: fired 2 times") for v in twice)
    early = i9(waiters, ended, [*starts, Start(30, 1, T0 + 3.0)],
               [Move(30, "waiting", "queued", T0 + 2.0) if m.job_id == 30 and m.old == "waiting" else m
                for m in moves])
    assert any(v.startswith("job 30:") and "started (its handler) 1.000s before its last dependency" in v
               for v in early)
    assert any(v.startswith("job 30:") and "fired (queued) 2.000s before" in v for v in early)
    never = i9(waiters, ended, starts, [m for m in moves if m.job_id != 30])
    assert any(v.startswith("job 30: batch 1 on_complete: never fired") for v in never)
    # on_success fired although member 21 died
    wrong = [Move(31, "waiting", "queued", T0 + 4.0) if m.job_id == 31 and m.old == "waiting" else m for m in moves]
    assert any(v.startswith("job 31:") and "ask for cancelled" in v for v in i9(waiters, ended, starts, wrong))


def test_i9_leaves_a_waiter_with_a_job_missing_from_the_database_to_i1() -> None:
    waiters, ended, starts, moves = flows_history()
    del ended[21]
    inv, counts = check_dependencies(waiters, ended, starts, moves, bound=REAPER)
    assert inv.ok and counts["i9_not_judged"] == 2
